// Package state persists the agent's pod statuses in --state-dir, so that a
// restarted probed keeps container IDs, start times, restart counts,
// Started/Ready and pod conditions (and, within the kubelet's rules M8/M9,
// does not report containers not-ready that were ready).
//
// The file is written atomically: a temporary file in the same directory is
// written, synced and renamed over the state file, and the directory is
// synced, so a crash mid-write leaves the previous state intact. A file that
// is corrupt, or was not written by probed, is reported and ignored.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/runtime/fileread"
)

// FileName is the state file inside the state directory.
const FileName = "probed-state.json"

// Kind and APIVersion mark probed's state files.
const (
	Kind       = "ProbedState"
	APIVersion = "probed.io/v1"
)

// MaxFileBytes bounds the state file read back (64 MiB).
const MaxFileBytes = 64 << 20

// File is the content of the state file.
type File struct {
	Kind       string           `json:"kind"`
	APIVersion string           `json:"apiVersion"`
	SavedAt    time.Time        `json:"savedAt"`
	Pods       []store.SavedPod `json:"pods"`
}

// Load reads the state file of dir. A missing file is no error (nil, nil).
// A corrupt or foreign file, one that is not a regular file (a FIFO, a
// device such as /dev/zero, a directory; opened without blocking) or one of
// more than MaxFileBytes is an error naming the file; the caller reports it
// and starts without state. Leftover temporary files of an interrupted
// write are removed.
func Load(dir string) ([]store.SavedPod, error) {
	if leftovers, err := filepath.Glob(filepath.Join(dir, ".probed-state-*.tmp")); err == nil {
		for _, f := range leftovers {
			_ = os.Remove(f)
		}
	}
	path := filepath.Join(dir, FileName)
	data, err := fileread.ReadFile(path, MaxFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var refused *fileread.Error
	if errors.As(err, &refused) {
		return nil, fmt.Errorf("state file %w; ignoring it", err)
	}
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	var f File
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (%v); ignoring it", path, err)
	}
	if f.Kind != Kind || f.APIVersion != APIVersion {
		return nil, fmt.Errorf("state file %s is not a probed state file (kind %q, apiVersion %q; want %s %s); ignoring it", path, f.Kind, f.APIVersion, Kind, APIVersion)
	}
	for i, p := range f.Pods {
		if p.UID == "" {
			return nil, fmt.Errorf("state file %s: pods[%d] has no uid; ignoring the file", path, i)
		}
	}
	return f.Pods, nil
}

// Save writes pods to the state file of dir atomically.
func Save(dir string, pods []store.SavedPod, now time.Time) error {
	data, err := json.Marshal(File{Kind: Kind, APIVersion: APIVersion, SavedAt: now.UTC(), Pods: pods})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".probed-state-*.tmp")
	if err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("replacing state file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
