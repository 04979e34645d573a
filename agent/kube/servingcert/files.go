package servingcert

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// FilesRecheck is how often Files looks whether its files changed.
const FilesRecheck = 10 * time.Second

// Files serves the certificate and key of two files another party keeps
// (cert-manager's Secret mounted as a volume: the kubelet swaps the files
// in place when it renews them), read again when their size or
// modification time changed, looked at no more often than FilesRecheck.
type Files struct {
	cert, key string
	clock     clock.PassiveClock

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string
	checked time.Time
}

// NewFiles reads the pair once; an unreadable or mismatched pair is an
// error. clk nil: the real clock.
func NewFiles(cert, key string, clk clock.PassiveClock) (*Files, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	f := &Files{cert: cert, key: key, clock: clk}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

// GetCertificate serves the pair (tls.Config.GetCertificate); a pair that
// stops loading keeps the last good one served.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.clock.Now(); now.Sub(f.checked) >= FilesRecheck {
		f.checked = now
		if stamp, err := f.stampOf(); err == nil && stamp != f.stamp {
			_ = f.loadLocked()
		}
	}
	return f.current, nil
}

// Ready reports true: NewFiles loaded a pair.
func (f *Files) Ready() bool { return true }

func (f *Files) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = f.clock.Now()
	return f.loadLocked()
}

func (f *Files) loadLocked() error {
	stamp, err := f.stampOf()
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return fmt.Errorf("serving certificate %s, key %s: %w", f.cert, f.key, err)
	}
	f.current, f.stamp = &pair, stamp
	return nil
}

func (f *Files) stampOf() (string, error) {
	out := ""
	for _, name := range []string{f.cert, f.key} {
		st, err := os.Stat(name)
		if err != nil {
			return "", err
		}
		out += fmt.Sprintf("%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return out, nil
}
