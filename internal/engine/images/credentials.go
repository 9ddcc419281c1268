package images

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Credentials are one registry's login as a Docker config.json holds it.
// They live on the control host (image_registry_auth_file) and, for one
// pull, in a credentials file on the pulling node (CredentialDir); never
// in a workflow's input, result or history. They print redacted.
type Credentials struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// String names the user only: credentials that reach a log by mistake
// show no secret.
func (c Credentials) String() string { return "credentials of " + c.Username + " (redacted)" }

// GoString is String (%#v).
func (c Credentials) GoString() string { return c.String() }

func (c Credentials) authConfig() authn.AuthConfig {
	return authn.AuthConfig{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}
}

func (c Credentials) empty() bool { return c == Credentials{} }

// LookupCredentials reads the login for registry reg (host[:port][/prefix])
// from file: a Docker config.json — its "auths" entry for the host, or the
// credential helper it names (credsStore, credHelpers), as `docker pull`
// would, Docker Hub under https://index.docker.io/v1/ — or one
// username:password line. Nil when the file holds none for that host (the
// pull goes anonymous). Errors name the file and say what to do.
func LookupCredentials(file, reg string) (*Credentials, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("image_registry_auth_file %s is not on the control host: sparklane reads registry logins there and hands the pulling node only one registry's, for one pull (it used to be read on each node): put the Docker config.json there (DOCKER_CONFIG=%s docker login HOST)", file, filepath.Dir(file)))
	}
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("image_registry_auth_file %s: %w: make it readable by the control service", file, err))
	}
	host := registryHost(reg)
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		line, _, _ := strings.Cut(string(trimmed), "\n")
		u, p, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || u == "" {
			return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("image_registry_auth_file %s is neither a Docker config.json nor a username:password line", file))
		}
		return &Credentials{Username: u, Password: p}, nil
	}
	cf, err := config.LoadFromReader(bytes.NewReader(b))
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("image_registry_auth_file %s is not a Docker config.json: %w", file, err))
	}
	for _, key := range authKeys(reg, host) {
		ac, err := cf.GetAuthConfig(key)
		if err != nil {
			return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("image_registry_auth_file %s: the login for %s: %w (its credential helper runs on the control host)", file, key, err))
		}
		c := Credentials{Username: ac.Username, Password: ac.Password, IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}
		if !c.empty() {
			return &c, nil
		}
	}
	return nil, nil
}

// authKeys are the keys a config.json may hold reg's login under, most
// specific first: Docker Hub's is its v1 URL.
func authKeys(reg, host string) []string {
	if host == contract.DockerHub || host == "index.docker.io" || host == "registry-1.docker.io" {
		return []string{authn.DefaultAuthKey, "docker.io", "index.docker.io"}
	}
	keys := []string{host, "https://" + host}
	if reg != host {
		keys = append([]string{reg}, keys...)
	}
	return keys
}

// CredentialDir is where the control service puts a pull's credentials on
// the pulling node (a node-local path: fs_root prefixes it), one 0600 file
// per pull in a 0700 directory, under /run (memory: gone at reboot).
const CredentialDir = "/run/sparklane/registry-auth"

// CredentialTTL bounds how long a credentials file may wait for its pull:
// every write, every pull and the node worker's start remove older ones,
// so a file whose pull never ran (the node worker died first, the control
// service never came back to drop it) is gone within it.
const CredentialTTL = 10 * time.Minute

// credentialName is a credentials file's name.
var credentialName = regexp.MustCompile(`^pull-[0-9a-f]{32}\.json$`)

// NewCredentialPath is a fresh credentials file's path on a node.
func NewCredentialPath() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return CredentialDir + "/pull-" + hex.EncodeToString(b) + ".json"
}

// CheckCredentialPath refuses a path that is not a credentials file's
// (an input can only name a file in CredentialDir).
func CheckCredentialPath(p string) error {
	if filepath.Dir(p) != CredentialDir || !credentialName.MatchString(filepath.Base(p)) {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%q is not a registry credentials file (%s/pull-HEX.json)", p, CredentialDir))
	}
	return nil
}

// credentialFile is a credentials file's content: the registry host and
// its login.
type credentialFile struct {
	Registry string `json:"registry"`
	Credentials
}

// CredentialPayload is what a credentials file for reg holds.
func CredentialPayload(reg string, c Credentials) ([]byte, error) {
	return json.Marshal(credentialFile{Registry: registryHost(reg), Credentials: c})
}

// WriteCredentials writes payload as the credentials file base (a name
// from NewCredentialPath) in dir (CredentialDir on a node local to the
// control host, fs_root prefixed): dir made 0700, files older than
// CredentialTTL removed, the file written 0600 under a temporary name
// and renamed.
func WriteCredentials(dir, base string, payload []byte) error {
	if !credentialName.MatchString(base) {
		return fmt.Errorf("%q is not a registry credentials file name", base)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	SweepCredentials(dir, CredentialTTL, time.Now())
	tmp := filepath.Join(dir, "."+base+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(payload)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, base))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// CredentialScript is the shell command that does WriteCredentials on a
// node over SSH, the payload on its stdin (never on its command line).
func CredentialScript(dir, base string) string {
	d := shellQuote(dir)
	tmp := shellQuote(dir + "/." + base + ".tmp")
	return fmt.Sprintf(`umask 077 && mkdir -p %s && chmod 700 %s && { find %s -maxdepth 1 -type f -name 'pull-*' -mmin +%d -delete 2>/dev/null; true; } && rm -f %s && cat >%s && mv -f %s %s`,
		d, d, d, int(CredentialTTL/time.Minute), tmp, tmp, tmp, shellQuote(dir+"/"+base))
}

// shellQuote makes s one POSIX shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TakeCredentials reads the credentials file base in dir and removes it
// at once (whatever it holds, it serves one pull), then removes the other
// files there older than CredentialTTL. The file must be a regular file
// (no link followed) and name reg's host.
func TakeCredentials(dir, base, reg string) (Credentials, error) {
	p := filepath.Join(dir, base)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Credentials{}, fmt.Errorf("registry credentials %s: %w (they wait at most %s for their pull: the run sends them again)", p, err, CredentialTTL)
	}
	os.Remove(p)
	defer SweepCredentials(dir, CredentialTTL, time.Now())
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Credentials{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("registry credentials %s is not a regular file", p))
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return Credentials{}, fmt.Errorf("registry credentials %s: %w", p, err)
	}
	var cf credentialFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return Credentials{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("registry credentials %s: not what sparklane writes", p))
	}
	if cf.Registry != registryHost(reg) {
		return Credentials{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("registry credentials %s are for %s, the pull is from %s", p, cf.Registry, registryHost(reg)))
	}
	return cf.Credentials, nil
}

// SweepCredentials removes the credentials files in dir older than ttl
// (0: all), and temporary ones left by an interrupted write. Best effort:
// the next write, pull or worker start sweeps again.
func SweepCredentials(dir string, ttl time.Duration, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !(credentialName.MatchString(n) || strings.HasPrefix(n, ".pull-") && strings.HasSuffix(n, ".tmp")) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) >= ttl {
			os.Remove(filepath.Join(dir, n))
		}
	}
}
