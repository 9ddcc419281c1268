package imagespec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
)

// CheckBuild checks b against the shared roots before anything is read:
// a context must be an absolute, clean directory under one of them with
// no symlink on its path; a git build names a ref; the Dockerfile stays
// inside the context. Errors say which key is wrong and how to fix it.
func CheckBuild(b contract.Build, sharedRoots []string) error {
	switch {
	case b.Context != "" && b.Git != "":
		return errors.New("[build] sets both context and git: keep one")
	case b.Context == "" && b.Git == "":
		return errors.New("[build] sets neither context nor git: give context = \"/shared/dir\" (under a shared root) or git = \"https://…\" with ref")
	case b.Git != "" && b.Ref == "":
		return fmt.Errorf("[build] git %s has no ref: pin a tag, branch or commit (ref = \"v1.2\")", b.Git)
	case b.Git != "":
		if err := checkGitURL(b.Git); err != nil {
			return err
		}
	}
	switch {
	case strings.ContainsAny(b.Ref, "# \t\n"):
		return fmt.Errorf("[build] ref %q is not a git ref: give a branch, tag or commit (a Docker subdirectory goes after a colon: ref = \"v1.2:docker\")", b.Ref)
	case b.Git == "" && b.Ref != "":
		return fmt.Errorf("[build] ref %q without git: a ref pins a git URL; remove it or set git", b.Ref)
	}
	if df := b.Dockerfile; df != "" && (filepath.IsAbs(df) || df != filepath.Clean(df) || df == ".." || strings.HasPrefix(df, "../")) {
		return fmt.Errorf("[build] dockerfile %q leaves the context: give a clean path relative to it (e.g. docker/Dockerfile)", df)
	}
	for k := range b.Args {
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return fmt.Errorf("[build] args key %q is not an ARG name", k)
		}
	}
	if b.Context == "" {
		return nil
	}
	if !filepath.IsAbs(b.Context) || filepath.Clean(b.Context) != b.Context {
		return fmt.Errorf("[build] context %q is not an absolute clean path: give the directory under a shared root", b.Context)
	}
	for _, r := range sharedRoots {
		if r != "" && (b.Context == filepath.Clean(r) || strings.HasPrefix(b.Context, filepath.Clean(r)+"/")) {
			return nil
		}
	}
	return fmt.Errorf("[build] context %s is under no shared root (%s): put the context on the NAS every node sees, or add its root to shared_roots", b.Context, strings.Join(sharedRoots, ", "))
}

// checkGitURL accepts the git URLs the node's Docker clones itself (its
// remote build context): git://host/repo, https://host/repo.git and
// git@host:repo. Docker reads an https URL without .git as a tarball and
// does not know ssh://, so those are refused here, saying what to write.
func checkGitURL(u string) error {
	switch {
	case strings.ContainsAny(u, "# \t\n"):
		return fmt.Errorf("[build] git %q is not a repository URL: put the ref in ref = \"…\", not after #", u)
	case strings.HasPrefix(u, "git://") && len(u) > len("git://") && !strings.HasPrefix(u, "git:///"):
		return nil
	case strings.HasPrefix(u, "https://"):
		if !strings.HasSuffix(u, ".git") {
			return fmt.Errorf("[build] git %q does not end in .git: Docker would read it as a tarball, not a repository; write %s.git", u, strings.TrimSuffix(u, "/"))
		}
		return nil
	case strings.HasPrefix(u, "ssh://"):
		return fmt.Errorf("[build] git %q: Docker does not clone ssh:// URLs; write it as git@host:path", u)
	case strings.HasPrefix(u, "git@") && strings.Contains(u, ":"):
		return nil
	}
	return fmt.Errorf("[build] git %q is not a repository URL: use git://host/repo, https://host/repo.git or git@host:path", u)
}
