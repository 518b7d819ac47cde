//go:build unix

package gateway

import "syscall"

// openFileLimit returns the process's soft limit on open files.
func openFileLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == ^uint64(0) {
		return 0, false
	}
	return uint64(lim.Cur), true
}
