package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes img's filesystem (its layers, flattened) into dir, which
// is emptied first: what a container of the image would see at /. The
// e2e suite runs the binaries from there, so it tests what ships.
func Unpack(img v1.Image, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	if err := errors.Join(extractTar(tar.NewReader(rc), dir), rc.Close()); err != nil {
		return fmt.Errorf("unpack into %s: %w", dir, err)
	}
	return nil
}
