package expertcache

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

func memory() (available, total int64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		fields := bytes.Fields(v)
		if len(fields) < 1 {
			continue
		}
		n, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil || n < 0 || n > 1<<50 {
			continue
		}
		if len(fields) > 1 && string(fields[1]) == "kB" {
			n <<= 10
		}
		switch string(k) {
		case "MemAvailable":
			available = n
		case "MemTotal":
			total = n
		}
	}
	return available, total
}
