// client/typescript holds no Go code. This file makes it a module of its
// own so that the repository's `go vet ./...`, `go test ./...` and
// golangci-lint skip it: npm packages in its node_modules may ship Go files
// (flatted, a dependency of eslint, does).
module github.com/coordinator-dev/coordinator/client/typescript

go 1.26
