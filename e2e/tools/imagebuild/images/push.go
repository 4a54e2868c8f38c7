package images

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushArchive pushes the image index of the tarball at archivePath to
// registry/NAME:tag, NAME being the image's name recorded in the tarball
// (tether-sidecar) and tag, when empty, its recorded tag (the version it
// was built with). It returns the reference and the digest pushed.
func PushArchive(ctx context.Context, archivePath, registry, tag string) (string, v1.Hash, error) {
	a, err := ReadArchive(archivePath)
	if err != nil {
		return "", v1.Hash{}, err
	}
	defer a.Close()
	recorded, err := name.NewTag(a.Ref, name.StrictValidation)
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("%s: the recorded name %q: %w", archivePath, a.Ref, err)
	}
	if tag == "" {
		tag = recorded.TagStr()
	}
	ref := strings.TrimSuffix(registry, "/") + "/" + path.Base(recorded.RepositoryStr()) + ":" + tag
	d, err := Push(ctx, a.Index, ref)
	return ref, d, err
}

// Push uploads idx (its manifests, configs and layers) as ref, with the
// credentials of the default keychain (docker login, credential helpers).
// A registry on localhost or 127.0.0.1 is spoken to over plain HTTP, as
// ggcr does for those hosts. The context bounds the whole upload.
func Push(ctx context.Context, idx v1.ImageIndex, ref string) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("push: %q: %w", ref, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", tag, err)
	}
	return idx.Digest()
}
