package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/buildinfo"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/fleet"
)

// versionInfo is what `starter version` prints: the same version and
// commit as the workers' sparklane_build_info (a release sets both with
// -ldflags -X; otherwise the source's Version and the Go toolchain's VCS
// stamp).
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	// Release is the unpacked release this starter runs from, if any.
	Release string `json:"release,omitempty"`
}

func (a *App) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print this starter's version, commit and Go version (and the release directory it runs from)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{Version: buildinfo.Version, Commit: buildinfo.BuildCommit(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
			if dir := selfRelease(); dir != "" {
				v.Release = dir
			}
			if a.JSON {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.Out, "sparklane %s (commit %s, %s, %s/%s)\n", v.Version, v.Commit, v.GoVersion, v.OS, v.Arch)
			if v.Release != "" {
				fmt.Fprintf(a.Out, "release: %s\n", v.Release)
			}
			return nil
		},
	}
}

// selfRelease is the unpacked release this program runs from (its
// directory holds a release manifest), or "".
func selfRelease() string {
	self, err := executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, fleet.ReleaseManifest)); err != nil {
		return ""
	}
	return dir
}

// unitsCmd writes the systemd units a release ships (scripts/release):
// the node service as a template unit and the control service, both at
// the default paths.
func (a *App) unitsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "units DIR",
		Short:  "write the release's systemd units into DIR (scripts/release)",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			l := fleet.DefaultLayout()
			units := map[string]string{
				"sparklane-node@.service": fleet.NodeUnitTemplate(),
				"sparklane-control.service": "# sparklane-control.service: sparklane's control service (embedded Temporal server,\n" +
					"# web UI, control worker, reverse SSH tunnels to the nodes) with the worker and the\n" +
					"# fleet config at these paths; 'starter control install' writes it for yours.\n" +
					fleet.WithoutHeader(control.Unit(l.Binary(), l.Config(), false)),
			}
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			for name, body := range units {
				if err := os.WriteFile(filepath.Join(args[0], name), []byte(body), 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
