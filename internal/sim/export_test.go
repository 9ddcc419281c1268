package sim

import "github.com/sparklane/sparklane/internal/engine/sparserows"

var tileOf = sparserows.Tile
