package cli

import "io"

func runCheck(args []string, stdin io.Reader, stdout, stderr io.Writer) int { return exitUsage }
