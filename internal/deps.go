//go:build tools

// Package internal pins modules that parts of the tree are about to use, so
// `go mod tidy` keeps them (at the known-good versions) while those parts
// are written.
package internal

import (
	_ "github.com/bmatcuk/doublestar/v4"
	_ "github.com/docker/docker/client"
	_ "github.com/pelletier/go-toml/v2"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/temporalio/ui-server/v2/server"
	_ "go.temporal.io/sdk/client"
	_ "go.temporal.io/server/schema/sqlite"
	_ "go.temporal.io/server/temporal"
	_ "go.uber.org/zap"
	_ "golang.org/x/crypto/ssh"
	_ "gopkg.in/yaml.v3"
)
