// Command pause is the sandbox ("pause") container of harness/node.py's
// containerd: it holds a pod's namespaces and does nothing else. No registry
// is reachable here, so it is built from this module and imported into
// containerd as a one-file scratch image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the pod it inherits orphaned processes: reap them.
	signal.Notify(signals, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
