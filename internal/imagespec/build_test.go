package imagespec

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

func TestCheckBuildNamesKeyAndFix(t *testing.T) {
	for _, c := range []struct {
		b    contract.Build
		want string
	}{
		{contract.Build{}, "neither context nor git"},
		{contract.Build{Context: "/nas/x", Git: "https://h/r.git"}, "both context and git"},
		{contract.Build{Git: "https://h/r.git"}, "has no ref"},
		{contract.Build{Git: "ftp://h/r", Ref: "v1"}, "not a repository URL"},
		{contract.Build{Git: "https://h/r", Ref: "v1"}, "does not end in .git"},
		{contract.Build{Git: "ssh://git@h/r.git", Ref: "v1"}, "git@host:path"},
		{contract.Build{Git: "git://h/r.git#v1", Ref: "v1"}, "not after #"},
		{contract.Build{Git: "git://h/r.git", Ref: "v1 x"}, "not a git ref"},
		{contract.Build{Context: "/nas/x", Ref: "v1"}, "ref \"v1\" without git"},
		{contract.Build{Context: "/nas/x", Dockerfile: "../Dockerfile"}, "leaves the context"},
		{contract.Build{Context: "nas/x"}, "not an absolute clean path"},
		{contract.Build{Context: "/srv/x"}, "under no shared root"},
		{contract.Build{Context: "/nas/x", Args: map[string]string{"A B": "1"}}, "not an ARG name"},
	} {
		err := CheckBuild(c.b, []string{"/nas"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckBuild(%+v) = %v, want %q", c.b, err, c.want)
		}
	}
	for _, u := range []string{"https://h/r.git", "git://h:9418/r", "git@h:org/r.git"} {
		if err := CheckBuild(contract.Build{Git: u, Ref: "v1"}, nil); err != nil {
			t.Errorf("a pinned git build from %s: %v", u, err)
		}
	}
}
