package contract

// Labels every sparklane container carries; they are how stop, inspect and
// the fleet probe find a lane's containers without remembering IDs.
const (
	LabelLane       = "sparklane.lane"
	LabelNode       = "sparklane.node"
	LabelRank       = "sparklane.rank"
	LabelRecipeHash = "sparklane.recipe-hash"
	// LabelSecretEnv names the container variables whose values are
	// secrets (the plan's env_from), comma-separated: names only, never a
	// value. Whoever reads a rank's log through this package (InspectLane,
	// CopyLogs) gets those values masked, read from the container's own
	// env — so the control service, which never resolves a secret, and a
	// restarted node worker mask them too.
	LabelSecretEnv = "sparklane.secret-env"
	// LabelImage is the recipe's image reference on a container created
	// from an image ID (RankSpec.ImageID): what reports show as its image.
	LabelImage = "sparklane.image"
)
