package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/discover"
	"github.com/sparklane/sparklane/internal/lane"
)

// fleetFacts decides what init writes for the fleet as a whole: the
// shared roots (found alike on every node, or --shared-root), the hub
// cache on them (found, asked or --hf-cache-dir), and the clusters the
// recipes beside out name. first is the first node's connection: a shared
// root looks the same from every node, so one is searched.
func (a *App) fleetFacts(ctx context.Context, hosts []discover.Host, first *ssh.Client, f initFlags, out string) (discover.Fleet, error) {
	var fl discover.Fleet
	if len(f.sharedRoots) > 0 {
		for _, p := range f.sharedRoots {
			if !filepath.IsAbs(p) {
				return fl, fmt.Errorf("--shared-root %q: give the absolute path every node mounts the NAS at", p)
			}
			fl.Shares.Mounts = append(fl.Shares.Mounts, discover.SharedMount{Path: filepath.Clean(p)})
		}
		fl.SharedGiven = true
	} else {
		fl.Shares = discover.SharedMounts(hosts)
	}
	var err error
	if fl.HFCacheDir, fl.HFCacheNote, err = a.chooseHub(ctx, first, fl.Shares.Paths(), f.hfCacheDir); err != nil {
		return fl, err
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	fl.Clusters, fl.TooLarge = recipeClusters(filepath.Join(filepath.Dir(out), config.DefaultRecipesDir), names)
	return fl, nil
}

// chooseHub picks hf_cache_dir: --hf-cache-dir when given, else the one
// hub cache on the shared roots; several are asked on a terminal and
// otherwise an error naming them and the flag. None is said in the note,
// with the flag to give it.
func (a *App) chooseHub(ctx context.Context, c *ssh.Client, roots []string, given string) (dir, note string, err error) {
	if given != "" {
		if !filepath.IsAbs(given) {
			return "", "", fmt.Errorf("--hf-cache-dir %q: give the absolute path of the hub cache on the NAS", given)
		}
		return filepath.Clean(given), "the Hugging Face hub cache, as given with --hf-cache-dir: staging reads it, fetch writes it", nil
	}
	if len(roots) == 0 {
		return "", "not written: no shared root to look for the Hugging Face hub cache on; give --hf-cache-dir PATH (the NAS directory holding models--ORG--NAME)", nil
	}
	hubs, err := discover.FindHubs(ctx, c, roots)
	if err != nil {
		return "", "", fmt.Errorf("looking for Hugging Face hub caches under %s: %w", strings.Join(roots, ", "), err)
	}
	switch {
	case len(hubs) == 1:
		return hubs[0], "the Hugging Face hub cache on the NAS (models--ORG--NAME): staging reads it, fetch writes it", nil
	case len(hubs) == 0:
		return "", fmt.Sprintf("not written: no Hugging Face hub cache (a directory holding models--ORG--NAME, or a huggingface/hub directory) under %s; give --hf-cache-dir PATH", strings.Join(roots, ", ")), nil
	case a.terminalIn() && !a.JSON:
		dir, err := a.askHub(hubs)
		return dir, "the Hugging Face hub cache on the NAS, as chosen at init: staging reads it, fetch writes it", err
	}
	return "", "", fmt.Errorf("%d Hugging Face hub caches on the shared roots (%s): choose one with --hf-cache-dir", len(hubs), strings.Join(hubs, ", "))
}

// askHub asks, on a terminal, which of several hub caches is the fleet's;
// a bad answer is asked again.
func (a *App) askHub(hubs []string) (string, error) {
	fmt.Fprintln(a.Err, "The shared roots hold several Hugging Face hub caches:")
	for i, h := range hubs {
		fmt.Fprintf(a.Err, "  %d) %s\n", i+1, h)
	}
	for {
		fmt.Fprintf(a.Err, "hf_cache_dir (1-%d): ", len(hubs))
		answer, err := a.readLine()
		if err != nil {
			return "", fmt.Errorf("reading the hub cache choice: %w", err)
		}
		if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(hubs) {
			return hubs[n-1], nil
		}
		if slices.Contains(hubs, answer) {
			return answer, nil
		}
		fmt.Fprintf(a.Err, "  %q: type a number from 1 to %d\n", answer, len(hubs))
	}
}

// recipeClusters sizes the clusters the recipes in dir name for a fleet of
// nodes (in order; the first is the head): a cluster gets the first N
// nodes, N the most any of its recipes needs (all of them when one says
// nothing: a TOML recipe's tensor_parallel defaults to its cluster's
// size); one whose recipes all need more nodes than the fleet has is too
// large. The clusters init writes anyway (NAME-1x, all-Nx) are not
// repeated; recipes that do not load are `starter lanes`'s to report.
func recipeClusters(dir string, nodes []string) (fit, tooLarge []discover.Cluster) {
	set, err := config.LoadRecipeSet(&config.Config{RecipesDir: dir})
	if err != nil || set == nil {
		return nil, nil
	}
	taken := map[string]bool{fmt.Sprintf("all-%dx", len(nodes)): true}
	for _, n := range nodes {
		taken[n+"-1x"] = true
	}
	byCluster := map[string][]*config.Recipe{}
	for _, r := range set.Recipes {
		if r.Cluster != "" && !taken[r.Cluster] {
			byCluster[r.Cluster] = append(byCluster[r.Cluster], r)
		}
	}
	for _, name := range sortedMapKeys(byCluster) {
		most, least := 0, 0
		var files []string
		for _, r := range byCluster[name] {
			need := lane.NodesNeeded(r)
			most = max(most, need)
			if least == 0 || max(need, 1) < least {
				least = max(need, 1)
			}
			files = append(files, filepath.Join(config.DefaultRecipesDir, filepath.Base(r.File)))
		}
		sort.Strings(files)
		if least > len(nodes) {
			tooLarge = append(tooLarge, discover.Cluster{Name: name, Needs: least, Recipes: files})
			continue
		}
		size := len(nodes)
		if most > 0 && most < size {
			size = most
		}
		fit = append(fit, discover.Cluster{Name: name, Nodes: nodes[:size], Needs: size, Recipes: files})
	}
	return fit, tooLarge
}

// printInitFleet says what init found for the fleet as a whole.
func (a *App) printInitFleet(res initJSON) {
	if len(res.SharedRoots) == 0 {
		fmt.Fprintln(a.Out, "shared roots: none (no filesystem is mounted at the same path on every node; give --shared-root PATH)")
	}
	for _, m := range res.SharedRoots {
		if m.Source == "" {
			fmt.Fprintf(a.Out, "shared root: %s (given)\n", m.Path)
			continue
		}
		fmt.Fprintf(a.Out, "shared root: %s (%s %s, the same on every node)\n", m.Path, m.FSType, m.Source)
	}
	for _, n := range res.SharedNotes {
		fmt.Fprintf(a.Out, "not shared: %s\n", n)
	}
	if res.HFCacheDir != "" {
		fmt.Fprintf(a.Out, "hf_cache_dir: %s\n", res.HFCacheDir)
	} else {
		fmt.Fprintf(a.Out, "hf_cache_dir: %s\n", res.HFCacheNote)
	}
	for _, c := range res.Clusters {
		fmt.Fprintf(a.Out, "cluster %s (%s) for %s\n", c.Name, strings.Join(c.Nodes, ", "), strings.Join(c.Recipes, ", "))
	}
	for _, c := range res.TooLarge {
		fmt.Fprintf(a.Out, "cluster %s not written: %s need %d nodes; this fleet has %d\n", c.Name, strings.Join(c.Recipes, ", "), c.Needs, len(res.Nodes))
	}
}
