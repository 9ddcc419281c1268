package images

import (
	"crypto/sha256"
	"encoding/hex"
)

// ChainIDs are the layer chain IDs of diffIDs (the OCI image spec's
// ChainID: the first is the first diffID, each next one the sha256 of
// "PREVIOUS DIFFID"). A daemon has a layer only with its whole chain
// below it, which is what `docker load` keys its skip on.
func ChainIDs(diffIDs []string) []string {
	out := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		s := sha256.Sum256([]byte(out[i-1] + " " + d))
		out[i] = "sha256:" + hex.EncodeToString(s[:])
	}
	return out
}
