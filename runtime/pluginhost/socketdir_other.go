//go:build !unix

package pluginhost

import "os"

const fileNoFollow = 0

// tryLock never locks outside unix: no directory is taken for stale.
func tryLock(*os.File) (bool, error) { return false, nil }
