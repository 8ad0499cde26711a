package repack

import "fmt"

// DefaultReserve is the free space a repack leaves on the output's file
// system.
const DefaultReserve = 1 << 30

// checkFreeSpace fails when the file system holding dir has less than need
// bytes plus the reserve available.
func checkFreeSpace(dir string, need, reserve int64) error {
	if reserve == 0 {
		reserve = DefaultReserve
	}
	if reserve < 0 {
		reserve = 0
	}
	free, err := freeSpace(dir)
	if err != nil {
		return fmt.Errorf("free space on %s: %w", dir, err)
	}
	if free < 0 {
		return nil // not measurable here
	}
	if free < need+reserve {
		return fmt.Errorf("not enough free space on %s: the repack needs %s more (plus a %s reserve) but only %s is available",
			dir, humanBytes(need), humanBytes(reserve), humanBytes(free))
	}
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
