module shipyard.dev/runner

go 1.22
