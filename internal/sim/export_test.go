package sim

import "github.com/sparklane/sparklane/internal/sparserows"

var tileOf = sparserows.Tile
