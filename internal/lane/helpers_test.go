package lane

import (
	"fmt"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// The config-file helpers this package's tests share with internal/config's.
var (
	errText           = conftest.ErrText
	wantLines         = conftest.WantLines
	repoRoot          = conftest.RepoRoot
	fixturesDir       = conftest.SparkrunFixtures
	writeFile         = conftest.WriteFile
	shippedRecipesDir = conftest.ShippedRecipes
)

const (
	hostileFleet = conftest.HostileFleet
	laneHead     = conftest.LaneHead
	goodConfig   = conftest.GoodConfig
)

// registryDir is a clone of spark-arena/recipe-registry, kept with the
// loader's fixtures (../config/testdata/registry/README.md).
const registryDir = "../config/testdata/registry"

// sparkFleet is four DGX Sparks on a RoCE switch: dgx1/dgx2 with their
// RDMA devices configured, dgx3/dgx4 without (detection fills them in on
// real nodes). Clusters of 1 to 4 nodes, quad the default.
func sparkFleet() *config.Config {
	cfg := &config.Config{
		File:           "sparklane.toml",
		HFCacheDir:     "/mnt/nas/huggingface/hub",
		SharedRoots:    []string{"/mnt/nas"},
		DefaultCluster: "quad",
		RecipesDirs:    []string{registryDir},
		Registries:     map[string]string{"arena": registryDir},
	}
	for i := 1; i <= 4; i++ {
		n := config.Node{Name: fmt.Sprintf("dgx%d", i), Address: fmt.Sprintf("192.168.100.1%d", i), Roots: []string{"/mnt/nvme"}}
		if i <= 2 {
			n.HCA = "rocep1s0f1,roceP2p1s0f1"
			n.IfName = "enp1s0f1np1,enP2p1s0f1np1"
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	cfg.Clusters = []config.Cluster{
		{Name: "solo", Nodes: []string{"dgx1"}},
		{Name: "pair", Nodes: []string{"dgx1", "dgx2"}},
		{Name: "trio", Nodes: []string{"dgx1", "dgx2", "dgx3"}},
		{Name: "quad", Nodes: []string{"dgx1", "dgx2", "dgx3", "dgx4"}},
	}
	return cfg
}

// checkFiles is `starter recipe check FILE...` without its notices.
func checkFiles(paths []string) []error {
	errs, _ := Check(paths)
	return errs
}

// mustConfig loads the fleet config at path, failing t if it does not.
func mustConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	return mustLoad(t, path, config.Load)
}

// mustRecipe loads the recipe at path, failing t if it does not.
func mustRecipe(t *testing.T, path string) *config.Recipe {
	t.Helper()
	return mustLoad(t, path, config.LoadRecipe)
}

// mustLoad is load(path), failing t on its error.
func mustLoad[T any](t *testing.T, path string, load func(string) (T, error)) T {
	t.Helper()
	v, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
