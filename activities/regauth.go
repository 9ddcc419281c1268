package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/node"
)

// SendRegistryAuth hands node in.Node the login for in.Registry's host,
// read here on the control host from in.AuthFile (a Docker config.json,
// its credential helpers run here): a 0600 file in the node's
// images.CredentialDir that only the next pull reads (and removes), written
// directly for a node on this machine, else over the node's SSH (host key
// checked), the login on the session's stdin. It returns the file's path
// on the node, never the login; no path when the file has no login for
// that registry (the pull is anonymous).
func (a *ControlActivities) SendRegistryAuth(ctx context.Context, in contract.RegistryAuthInput) (contract.RegistryAuthResult, error) {
	n, err := a.node(in.Node)
	if err != nil {
		return contract.RegistryAuthResult{}, classify(err)
	}
	creds, err := images.LookupCredentials(in.AuthFile, in.Registry)
	if err != nil || creds == nil {
		return contract.RegistryAuthResult{}, classify(err)
	}
	payload, err := images.CredentialPayload(in.Registry, *creds)
	if err != nil {
		return contract.RegistryAuthResult{}, classify(err)
	}
	p := images.NewCredentialPath()
	dir, base := n.LocalPath(images.CredentialDir, nil), filepath.Base(p)
	err = a.onNode(ctx, n, images.CredentialScript(dir, base), payload, func() error { return images.WriteCredentials(dir, base, payload) })
	if err != nil {
		return contract.RegistryAuthResult{}, classify(fmt.Errorf("node %s: hand it the login for registry %s: %w", n.Name, in.Registry, err))
	}
	if a.Log != nil {
		a.Log.Info("registry login handed to the pulling node", zap.String("node", n.Name), zap.String("registry", in.Registry), zap.String("path", p))
	}
	return contract.RegistryAuthResult{Path: p}, nil
}

// DropRegistryAuth removes a credentials file SendRegistryAuth wrote, once
// its pull has ended: the pull removes it as it reads it, so this matters
// when the pull never started (its worker was gone). Removing a file that
// is gone is no error.
func (a *ControlActivities) DropRegistryAuth(ctx context.Context, in contract.RegistryAuthDrop) error {
	n, err := a.node(in.Node)
	if err != nil {
		return classify(err)
	}
	if err := images.CheckCredentialPath(in.Path); err != nil {
		return classify(err)
	}
	local := n.LocalPath(in.Path, nil)
	err = a.onNode(ctx, n, "rm -f '"+strings.ReplaceAll(local, "'", `'\''`)+"'", nil, func() error {
		if err := os.Remove(local); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return classify(fmt.Errorf("node %s: remove the registry login %s: %w", n.Name, in.Path, err))
	}
	return nil
}

// onNode runs local for a node on this machine (no ssh), else script
// over the node's SSH with stdin (nil: none), its output named in the
// error of a non-zero exit.
func (a *ControlActivities) onNode(ctx context.Context, n config.Node, script string, stdin []byte, local func() error) error {
	if n.SSH == "" {
		return local()
	}
	t, err := a.sshTarget(n)
	if err != nil {
		return fault.Permanent(fault.InvalidSpec, err)
	}
	timeout := a.SSHTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c, err := node.Dial(ctx, t, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("ssh %s: open session: %w", t.Addr(), err)
	}
	defer s.Close()
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	if out, err := s.CombinedOutput(script); err != nil {
		return fmt.Errorf("ssh %s: %w: %s", t.Addr(), err, strings.TrimSpace(string(out)))
	}
	return nil
}
