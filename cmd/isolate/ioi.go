package main

// isIOIForm tells whether the command line is ioi/isolate's form
// (--init, --run or --cleanup among the options).
func isIOIForm(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		switch a {
		case "--init", "--run", "--cleanup":
			return true
		}
	}
	return false
}

// runIOI runs ioi/isolate's form of the command line.
func runIOI(args []string) int {
	return runIOIForm(args)
}

func runIOIForm(args []string) int { return 2 }
