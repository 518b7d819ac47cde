package lab

import (
	"context"
	"time"
)

// ClockShim returns the path of the LD_PRELOAD library that moves one
// process's wall clock (see clockShimC), compiled once; a process started
// with LD_PRELOAD=path and LAB_CLOCK_OFFSET_FILE=file reads its offset
// from file, which MoveClock writes. End-to-end tests use it to move a
// Redis server's clock, not sleep.
func ClockShim(ctx context.Context) (string, error) { return buildClockShim(ctx) }

// MoveClock sets the wall-clock offset of the processes that read file.
func MoveClock(file string, by time.Duration) error { return jumpClock(file, by) }
