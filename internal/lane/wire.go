package lane

import (
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Wire is the recipe as a run carries it: the loaded file's values in the
// contract's types, field for field (LoadWarnings aside: they reach the
// plan's warnings instead). Maps and slices are shared with r, as a copy
// of the recipe would share them. Its JSON is what histories hold and
// RecipeHash hashes, so every field of the file type must arrive here.
func Wire(r *config.Recipe) contract.Recipe {
	return contract.Recipe{
		File:                  r.File,
		Format:                r.Format,
		Name:                  r.Name,
		Aliases:               r.Aliases,
		Cluster:               r.Cluster,
		Runtime:               r.Runtime,
		Image:                 r.Image,
		Model:                 r.Model,
		MinNodes:              r.MinNodes,
		MaxNodes:              r.MaxNodes,
		Mode:                  r.Mode,
		ModelRevision:         r.ModelRevision,
		Executor:              contract.Executor(r.Executor),
		PreExec:               each(r.PreExec, func(p config.PreExec) contract.PreExec { return contract.PreExec(p) }),
		PostExec:              r.PostExec,
		PostCommands:          r.PostCommands,
		StopAfterPost:         r.StopAfterPost,
		RuntimeConfig:         r.RuntimeConfig,
		BuildArgs:             r.BuildArgs,
		Builder:               r.Builder,
		BuilderConfig:         r.BuilderConfig,
		Build:                 wireBuild(r),
		ImageRegistry:         r.ImageRegistry,
		ImageRegistryAuthFile: r.ImageRegistryAuthFile,
		RecipeVersion:         r.RecipeVersion,
		Metadata:              r.Metadata,
		Mods:                  r.Mods,
		Command:               r.Command,
		Defaults:              r.Defaults,
		Env:                   r.Env,
		EnvFrom:               r.EnvFrom,
		Mounts:                each(r.Mounts, func(m config.Mount) contract.Mount { return contract.Mount(m) }),
		Hooks:                 contract.Hooks{BeforeServe: r.Hooks.BeforeServe, Clear: r.Hooks.Clear, Timeout: contract.Duration(r.Hooks.Timeout)},
		Staging:               each(r.Staging, wireStaging),
		Probe:                 wireProbe(r.Probe),
		NodeOutageBudget:      contract.Duration(r.NodeOutageBudget),
		Relay:                 r.Relay,
		Bench:                 contract.Bench(r.Bench),
		Keep:                  contract.Keep{Interval: contract.Duration(r.Keep.Interval), Restarts: r.Keep.Restarts, Window: contract.Duration(r.Keep.Window), Off: r.Keep.Off},
		Gateway:               contract.RecipeGateway(r.Gateway),
	}
}

func wireStaging(s config.Staging) contract.Staging {
	return contract.Staging{
		Kind: s.Kind, ID: s.ID, Src: s.Src, Dst: s.Dst, MinFree: s.MinFree,
		Repos: s.Repos, Skip: s.Skip, Verify: s.Verify, Revision: s.Revision, Fetch: s.Fetch,
		Exports: each(s.Exports, func(e config.Export) contract.Export { return contract.Export(e) }),
		Format:  s.Format, Tensors: s.Tensors, Layers: s.Layers, Mount: s.Mount, EnvVar: s.EnvVar,
		RowsEnv: s.RowsEnv, Rows: s.Rows, RecordBytes: s.RecordBytes,
	}
}

func wireProbe(p config.Probe) contract.Probe {
	return contract.Probe{
		Ready: contract.Duration(p.Ready), Path: p.Path,
		Smoke:     each(p.Smoke, func(s config.Smoke) contract.Smoke { return contract.Smoke(s) }),
		ModelType: p.ModelType, LogSignatures: p.LogSignatures, APIKeyEnv: p.APIKeyEnv,
		DecodePromptTokens: p.DecodePromptTokens, DecodeMaxTokens: p.DecodeMaxTokens,
	}
}

// each converts a slice element by element, nil staying nil.
func each[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
