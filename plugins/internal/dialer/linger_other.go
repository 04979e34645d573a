//go:build !unix

package dialer

func setLinger(int) error { return nil }
