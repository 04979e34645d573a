package pluginhost

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/probed/probed/runtime/fileread"
	"github.com/probed/probed/runtime/pluginproto"
)

// Config is the plugin configuration file (--plugin-config), YAML or JSON:
//
//	plugins:
//	- name: http-match                 # required, unique: names the plugin in logs and metrics
//	  path: probed-plugin-http-match   # relative: to the plugin directory, else to this file's directory;
//	                                   # default: <plugin directory>/<name>
//	  args: []                         # optional command-line arguments
//	  env: {GODEBUG: "..."}            # optional: environment variables (win over the agent's)
//	  sha256: 9f86d0...                # optional: hex SHA-256 the binary must have (checked before every start)
//	  maxInFlight: 32                  # optional: most probes in flight in this plugin (default: the plugin's
//	                                   # own preference, else Options.DefaultMaxInFlight)
//	  config: {key: value}             # optional: plugin-wide settings sent with Configure
//	  params:                          # optional: the parameters allowed per kind; replaces the schema the
//	    http-match:                    # plugin reports for that kind
//	      path: {required: true, pattern: "^/"}
//	      body: {}
//	  trustEgress: false               # optional: run its probes in cluster mode even though it does not
//	                                   # announce probeplugin v1.1 (it does not enforce the egress policy)
//
// Unknown fields are errors.
type Config struct {
	Plugins []PluginConfig `json:"plugins"`
}

// PluginConfig configures one plugin. See Config for the file format.
type PluginConfig struct {
	// Name names the plugin (logs, metrics, errors); not the kinds it
	// serves, which it reports itself.
	Name string `json:"name"`
	// Path is the plugin binary.
	Path string `json:"path,omitempty"`
	// Args are passed to the binary.
	Args []string `json:"args,omitempty"`
	// Env sets environment variables of the plugin, which otherwise
	// inherits the agent's; these win over the agent's.
	Env map[string]string `json:"env,omitempty"`
	// SHA256 pins the binary: the hex SHA-256 it must have. The host checks
	// it before every start (streamed through runtime/fileread, at most
	// MaxBinaryBytes) and refuses a binary that differs. Own the directory
	// too: the check and the exec are not atomic.
	SHA256 string `json:"sha256,omitempty"`
	// MaxInFlight caps the probes in flight in this plugin; a probe over the
	// cap waits until its deadline, then is errored.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// Config is sent to the plugin with Configure.
	Config map[string]string `json:"config,omitempty"`
	// Params, by kind, replaces the parameter schema the plugin reports.
	Params map[string]map[string]ParamSchema `json:"params,omitempty"`
	// TrustEgress runs the plugin's probes under an egress policy (cluster
	// mode, runtime/egress) even though the plugin does not announce
	// pluginproto.APIVersionEgress, that is, does not promise to connect only
	// where the policy allows. The operator then vouches for where the
	// plugin connects; without it such probes are errored in cluster mode.
	TrustEgress bool `json:"trustEgress,omitempty"`
}

// ParamSchema describes an allowed parameter.
type ParamSchema struct {
	// Required parameters must be present.
	Required bool `json:"required,omitempty"`
	// Pattern, when set, is an RE2 regular expression the whole value must
	// match.
	Pattern string `json:"pattern,omitempty"`
	// Description is informative.
	Description string `json:"description,omitempty"`
}

// MaxConfigBytes bounds the plugin configuration file: 1 MiB.
const MaxConfigBytes = 1 << 20

// MaxBinaryBytes bounds what is hashed of a pinned plugin binary: 1 GiB. A
// larger binary (or one that does not end, a device behind a symlink) is
// refused; the hash streams, so the limit bounds time, not memory.
const MaxBinaryBytes = 1 << 30

// LoadConfig reads a plugin configuration file (YAML or JSON, strictly:
// unknown fields are errors) and checks it with Validate. The file must be
// a regular file of at most MaxConfigBytes (read with runtime/fileread: a
// FIFO or device is refused without blocking). Relative paths are
// left as written; New resolves them.
func LoadConfig(path string) (*Config, error) {
	data, err := fileread.ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("plugin config %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("plugin config %s: %w", path, err)
	}
	return &c, nil
}

var pluginName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// Validate checks every entry: a name (letters, digits, '-', '_', '.'; at
// most 63 characters) unique in the file, a sha256 of 64 hex digits when
// set, a non-negative maxInFlight, parameter patterns that compile, no
// reserved parameter names (pluginproto.ReservedParamPrefix) and no
// environment variable name that is empty or holds '='.
func (c *Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, p := range c.Plugins {
		where := fmt.Sprintf("plugins[%d]", i)
		if p.Name != "" {
			where += fmt.Sprintf(" (%s)", p.Name)
		}
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("%s: name is required", where))
		case !pluginName.MatchString(p.Name):
			errs = append(errs, fmt.Errorf("%s: invalid name: want letters, digits, '-', '_' and '.', at most 63 characters", where))
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("%s: name %q is used twice", where, p.Name))
		}
		seen[p.Name] = true
		if p.SHA256 != "" {
			if _, err := parseChecksum(p.SHA256); err != nil {
				errs = append(errs, fmt.Errorf("%s: sha256: %w", where, err))
			}
		}
		if p.MaxInFlight < 0 {
			errs = append(errs, fmt.Errorf("%s: maxInFlight must be >= 0", where))
		}
		for k := range p.Env {
			if k == "" || strings.ContainsRune(k, '=') {
				errs = append(errs, fmt.Errorf("%s: env: invalid variable name %q", where, k))
			}
		}
		for kind, params := range p.Params {
			for name, s := range params {
				if name == "" || strings.HasPrefix(name, pluginproto.ReservedParamPrefix) {
					errs = append(errs, fmt.Errorf("%s: params.%s: invalid parameter name %q", where, kind, name))
				}
				if s.Pattern != "" {
					if _, err := regexp.Compile(s.Pattern); err != nil {
						errs = append(errs, fmt.Errorf("%s: params.%s.%s.pattern: %w", where, kind, name, err))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func parseChecksum(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("%q is not a hex SHA-256 (64 hex digits)", s)
	}
	return b, nil
}

// plan merges the plugin directory's binaries with the configured plugins
// into the list to start, with absolute paths.
//
// The directory must be one only root or the agent's user can write
// (checkTrusted). Every regular file in dir (symlinks followed) with an
// execute bit whose
// name does not start with '.' is a plugin named after the file. A
// configured plugin with the same name configures that binary; its path
// defaults to dir/name. Relative configured paths resolve against dir, or
// when there is none against baseDir (the config file's directory).
func plan(dir, baseDir string, configured []PluginConfig) ([]PluginConfig, error) {
	byName := map[string]int{}
	var out []PluginConfig
	for _, p := range configured {
		byName[p.Name] = len(out)
		out = append(out, p)
	}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("plugin directory %s: %w", dir, err)
		}
		dir = abs
		if err := checkTrusted("plugin directory", dir); err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("plugin directory: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				continue
			}
			if _, ok := byName[name]; ok {
				continue
			}
			if !pluginName.MatchString(name) {
				return nil, fmt.Errorf("plugin directory %s: %q is not a valid plugin name (letters, digits, '-', '_', '.')", dir, name)
			}
			byName[name] = len(out)
			out = append(out, PluginConfig{Name: name, Path: filepath.Join(dir, name)})
		}
	}
	for i := range out {
		p := &out[i]
		switch {
		case p.Path == "" && dir == "":
			return nil, fmt.Errorf("plugin %q: no path and no plugin directory", p.Name)
		case p.Path == "":
			p.Path = filepath.Join(dir, p.Name)
		case !filepath.IsAbs(p.Path) && dir != "":
			p.Path = filepath.Join(dir, p.Path)
		case !filepath.IsAbs(p.Path) && baseDir != "":
			p.Path = filepath.Join(baseDir, p.Path)
		}
		abs, err := filepath.Abs(p.Path)
		if err != nil {
			return nil, fmt.Errorf("plugin %q: %w", p.Name, err)
		}
		p.Path = abs
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
