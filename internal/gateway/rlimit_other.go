//go:build !unix

package gateway

// openFileLimit reports that there is no open-file limit to read.
func openFileLimit() (uint64, bool) { return 0, false }
