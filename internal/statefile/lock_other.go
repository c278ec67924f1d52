//go:build !unix

package statefile

import (
	"errors"
	"os"
)

func lock(*os.File) error {
	return errors.New("locking a state directory needs a Unix system")
}
