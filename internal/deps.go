//go:build tools

// Package internal pins modules that parts of the tree are about to use, so
// `go mod tidy` keeps them while those parts are written.
package internal

import (
	_ "github.com/bmatcuk/doublestar/v4"
	_ "github.com/pelletier/go-toml/v2"
	_ "gopkg.in/yaml.v3"
)
