// Package imagespec checks what a recipe and the fleet config may say of a
// lane's image before any node or registry is asked: a [build]
// (CheckBuild), an image_registry and image_registry_auth_file
// (CheckRegistry), and where the control host's own Docker logins are
// (DefaultAuthFile), and a registry host as an image names it
// (CheckRegistryHost). It needs neither Docker nor a registry client, so
// the config, the resolver (internal/lane) and the CLI link it without
// them; the image engine (internal/engine/images) calls it too. It knows
// nothing of Temporal and imports no engine.
package imagespec
