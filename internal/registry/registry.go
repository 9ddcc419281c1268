package registry

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/regset"
)

// Registry is one clone: its name, where it came from, what it follows
// (Ref: a branch, tag or commit; empty is the remote's default branch)
// and the commit checked out.
type Registry struct {
	Name   string `json:"name"`
	URL    string `json:"url"`
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit"`
	Path   string `json:"path"`
	// Disabled says `starter registry disable` turned it off: its
	// recipes are neither listed nor resolved (internal/regset).
	Disabled bool `json:"disabled,omitempty"`
}

// Dir is where registry clones live: STATE_DIR/registries.
func Dir(stateDir string) string { return filepath.Join(stateDir, "registries") }

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	// Never ask for credentials on a terminal: a private registry needs a
	// credential helper or an SSH key, and a prompt would hang the CLI.
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Add clones url into STATE_DIR/registries/NAME and checks out ref (the
// remote's default branch when empty). A name already there is refused:
// update it, or remove it first.
func Add(ctx context.Context, stateDir, name, url, ref string) (Registry, error) {
	if err := config.ValidName(name); err != nil {
		return Registry{}, fmt.Errorf("registry name %q: %w", name, err)
	}
	if err := CheckURL(url); err != nil {
		return Registry{}, fmt.Errorf("registry %s: %w", name, err)
	}
	if err := CheckRef(ref); err != nil {
		return Registry{}, fmt.Errorf("registry %s: --ref %w", name, err)
	}
	dir := filepath.Join(Dir(stateDir), name)
	if _, err := os.Stat(dir); err == nil {
		return Registry{}, fmt.Errorf("registry %s is already at %s: `starter registry update %s`, or remove it first", name, dir, name)
	}
	if err := os.MkdirAll(Dir(stateDir), 0o755); err != nil {
		return Registry{}, err
	}
	tmp, err := os.MkdirTemp(Dir(stateDir), "."+name+".clone-")
	if err != nil {
		return Registry{}, err
	}
	defer os.RemoveAll(tmp)
	if _, err := git(ctx, tmp, "clone", "--quiet", "--end-of-options", url, "clone"); err != nil {
		return Registry{}, fmt.Errorf("registry %s: %w", name, err)
	}
	clone := filepath.Join(tmp, "clone")
	if _, err := git(ctx, clone, "config", "--end-of-options", "sparklane.ref", ref); err != nil {
		return Registry{}, err
	}
	if err := checkout(ctx, clone, ref); err != nil {
		return Registry{}, fmt.Errorf("registry %s: %w", name, err)
	}
	if err := os.Rename(clone, dir); err != nil {
		return Registry{}, err
	}
	return Get(ctx, stateDir, name)
}

// checkout moves the clone to ref as the remote has it: a branch's
// remote head, else a tag or a commit. The ref is checked again (one read
// back from the clone's config may have been edited) and resolved with
// --end-of-options; checkout then gets the commit's hash, which no option
// starts like (git 2.39's checkout takes --end-of-options for a path).
func checkout(ctx context.Context, dir, ref string) error {
	if err := CheckRef(ref); err != nil {
		return fmt.Errorf("ref %w: fix sparklane.ref in %s", err, filepath.Join(dir, ".git", "config"))
	}
	target := "origin/HEAD"
	if ref != "" {
		target = ref
		if _, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", "origin/"+ref+"^{commit}"); err == nil {
			target = "origin/" + ref
		}
	}
	commit, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", target+"^{commit}")
	if err == nil {
		_, err = git(ctx, dir, "checkout", "--quiet", "--detach", commit)
	}
	if err != nil {
		return fmt.Errorf("ref %q: %w", cmp.Or(ref, "the remote's default branch"), err)
	}
	return nil
}

// CheckURL refuses a registry URL git could take for something else: one
// starting with '-' (an option), holding a control character, or naming
// git's ext:: or fd:: transports (they run commands). Any other git URL
// or local path is git's to judge.
func CheckURL(url string) error {
	switch {
	case url == "":
		return errors.New("empty URL: give the registry's git URL or a local path")
	case strings.HasPrefix(url, "-"):
		return fmt.Errorf("URL %q starts with '-', which git would read as an option: give the registry's git URL (https://…, git@host:…) or a path (./%s)", url, url)
	case strings.IndexFunc(url, unicode.IsControl) >= 0:
		return fmt.Errorf("URL %q holds a control character: give the registry's git URL", url)
	case strings.HasPrefix(url, "ext::"), strings.HasPrefix(url, "fd::"):
		return fmt.Errorf("URL %q uses git's %s transport, which runs a command: give an https://, ssh or file URL, or a path", url, url[:strings.Index(url, "::")+2])
	}
	return nil
}

// CheckRef refuses a --ref that is no branch, tag or commit name by git's
// rules (git check-ref-format, plus a commit hash): in particular one
// starting with '-', which git would read as an option. Empty is the
// remote's default branch.
func CheckRef(ref string) error {
	bad := ""
	switch {
	case ref == "":
		return nil
	case strings.HasPrefix(ref, "-"):
		bad = "starts with '-', which git would read as an option"
	case strings.IndexFunc(ref, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
		bad = "holds a space or control character"
	case strings.ContainsAny(ref, "~^:?*[\\"), strings.Contains(ref, ".."), strings.Contains(ref, "@{"), strings.Contains(ref, "//"),
		strings.HasSuffix(ref, "/"), strings.HasSuffix(ref, "."), strings.HasSuffix(ref, ".lock"), strings.HasPrefix(ref, "/"), ref == "@":
		bad = "is not a valid git ref name"
	default:
		return nil
	}
	return fmt.Errorf("%q %s: give a branch, tag or commit (e.g. main, v1.2, 3f2a9c1)", ref, bad)
}

// Update fetches registry name and checks out its ref again (a branch
// moves to its new head; a tag or commit stays).
func Update(ctx context.Context, stateDir, name string) (Registry, error) {
	if err := config.ValidName(name); err != nil {
		return Registry{}, fmt.Errorf("registry name %q: %w", name, err)
	}
	dir := filepath.Join(Dir(stateDir), name)
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		return Registry{}, fmt.Errorf("no registry %s (%s): `starter registry list` shows them", name, dir)
	}
	if _, err := git(ctx, dir, "fetch", "--quiet", "--tags", "--force", "origin"); err != nil {
		return Registry{}, fmt.Errorf("registry %s: %w", name, err)
	}
	// The remote's default branch may have moved too.
	_, _ = git(ctx, dir, "remote", "set-head", "origin", "--auto")
	ref, _ := git(ctx, dir, "config", "--get", "sparklane.ref")
	if err := checkout(ctx, dir, ref); err != nil {
		return Registry{}, fmt.Errorf("registry %s: %w", name, err)
	}
	return Get(ctx, stateDir, name)
}

// Get describes registry name.
func Get(ctx context.Context, stateDir, name string) (Registry, error) {
	if err := config.ValidName(name); err != nil {
		return Registry{}, fmt.Errorf("registry name %q: %w", name, err)
	}
	dir := filepath.Join(Dir(stateDir), name)
	r := Registry{Name: name, Path: dir}
	var err error
	if r.Commit, err = git(ctx, dir, "rev-parse", "HEAD"); err != nil {
		return r, fmt.Errorf("registry %s (%s): %w", name, dir, err)
	}
	r.URL, _ = git(ctx, dir, "config", "--get", "remote.origin.url")
	r.Ref, _ = git(ctx, dir, "config", "--get", "sparklane.ref")
	r.Disabled = slices.Contains(regset.Disabled(stateDir), name)
	return r, nil
}

// List describes every registry under STATE_DIR/registries, by name.
func List(ctx context.Context, stateDir string) ([]Registry, error) {
	ents, err := os.ReadDir(Dir(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Registry
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || config.ValidName(e.Name()) != nil {
			continue // not a clone Add made (regset.Resolve skips it too)
		}
		r, err := Get(ctx, stateDir, e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes registry name's clone.
func Remove(stateDir, name string) error {
	if err := config.ValidName(name); err != nil {
		return fmt.Errorf("registry name %q: %w", name, err)
	}
	dir := filepath.Join(Dir(stateDir), name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no registry %s (%s): `starter registry list` shows them", name, dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	_, err := regset.Set(stateDir, name, false) // a name added again starts enabled
	return err
}

// Enable turns registry name on again (on: false turns it off, as
// `starter registry disable`); cfg is the fleet config as loaded, whose
// Registries and DisabledRegistries say which names exist. It reports
// whether anything changed.
func Enable(cfg *config.Config, name string, on bool) (bool, error) {
	_, known := cfg.Registries[name]
	_, off := cfg.DisabledRegistries[name]
	if !known && !off {
		return false, fmt.Errorf("no registry %s: `starter registry list` shows the clones, [registries] in %s the others", name, cfg.File)
	}
	return regset.Set(cfg.StateDir, name, !on)
}
