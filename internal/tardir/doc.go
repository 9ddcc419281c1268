// Package tardir writes a directory as a tar stream under a destination
// path: a recipe's mods, copied into a rank container by the serve engine
// and sized by the lane resolver at render. It imports nothing of the
// project.
package tardir
