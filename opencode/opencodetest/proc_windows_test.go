package opencodetest_test

import "os"

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid) // fails on Windows when there is no such process
	if err != nil {
		return false
	}
	p.Release()
	return true
}

// groupAlive is false: Windows has no process groups to check.
func groupAlive(int) bool { return false }
