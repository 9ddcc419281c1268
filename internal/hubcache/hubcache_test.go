package hubcache

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestRepoDirIsHuggingFaceHubsName(t *testing.T) {
	for repo, want := range map[string]string{
		"org/model":            "models--org--model",
		"deepseek-ai/DeepSeek": "models--deepseek-ai--DeepSeek",
		"gpt2":                 "models--gpt2",
	} {
		if got := RepoDir(repo); got != want {
			t.Errorf("RepoDir(%q) = %q, want %q", repo, got, want)
		}
	}
	if got, want := RepoPath("/nas/hub", "org/model"), filepath.Join("/nas/hub", "models--org--model"); got != want {
		t.Errorf("RepoPath = %q, want %q", got, want)
	}
}

// IsCommit and IsSHA256 accept exactly what the regular expressions they
// replace accepted.
func TestHexNamesMatchTheirRegexps(t *testing.T) {
	commitRE := regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256RE := regexp.MustCompile(`^[0-9a-f]{64}$`)
	commit := "0123456789abcdef0123456789abcdef01234567"
	sum := strings.Repeat("0123456789abcdef", 4)
	cases := []string{
		"", "main", commit, sum, commit + "\n", sum + "\n", strings.ToUpper(commit), strings.ToUpper(sum),
		commit[:39], sum[:63], commit + "0", sum + "0", "g" + commit[1:], "g" + sum[1:], commit[:39] + "/", " " + sum[1:],
	}
	for _, s := range cases {
		if got, want := IsCommit(s), commitRE.MatchString(s); got != want {
			t.Errorf("IsCommit(%q) = %v, want %v", s, got, want)
		}
		if got, want := IsSHA256(s), sha256RE.MatchString(s); got != want {
			t.Errorf("IsSHA256(%q) = %v, want %v", s, got, want)
		}
		if got, want := IsBlobName(s), commitRE.MatchString(s) || sha256RE.MatchString(s); got != want {
			t.Errorf("IsBlobName(%q) = %v, want %v", s, got, want)
		}
	}
	if !IsCommit(commit) || !IsSHA256(sum) {
		t.Fatal("a full commit and a full sha256 must be accepted")
	}
}
