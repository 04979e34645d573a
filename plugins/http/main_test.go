package http

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// probe connection, client timer and server must be gone at the end.
// Goroutines running before the tests (package init, such as the ants
// default pool pulled in by package runtime) are not leaks.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }
