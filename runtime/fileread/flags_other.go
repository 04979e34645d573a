//go:build !unix

package fileread

const openFlags = 0
