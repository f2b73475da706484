package gpu

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/debcache"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// generatedChrootDir is the host path of the podvm-rootfs builder's tree
// (rootfs.GeneratedChrootDir).
const generatedChrootDir = "PodvmChrootDir"

// debCache returns the deb cache and the image's root on this host when
// the target is the podvm-rootfs chroot and build_cache allows it; nil
// otherwise (a remote VM downloads from its own mirrors).
func (e *executor) debCache(c gpustack.ModuleCache) (*debcache.Store, string) {
	root, _ := e.generated[generatedChrootDir].(string)
	if c.Mode == "no" || e.generated[generatedChroot] != "true" || !filepath.IsAbs(root) {
		return nil, ""
	}
	dir, err := modcache.Root(c.Dir)
	if err == nil {
		err = modcache.Trusted(dir)
	}
	if err != nil {
		e.ui.Say(fmt.Sprintf("deb cache: off: %v", err))
		return nil, ""
	}
	return debcache.New(dir, c.MaxSize), root
}

// withDebs runs an apt command that downloads into the image's archive
// directory archives (a path in the image) through the deb cache: what
// apt would download (aptCmd with --print-uris) is placed there first
// where the cache has it, and what apt downloaded is kept afterwards. A
// cache that fails is reported and left out; the command always runs.
func (e *executor) withDebs(ctx context.Context, aptCmd, archives string, run func() error) error {
	if e.debs == nil {
		return run()
	}
	dir := func() (string, error) { return chroot.ResolveIn(e.chrootRoot, archives) }
	query := func(cmd string) (string, error) { return e.r.query(ctx, cmd) }
	return e.debs.Around(query, aptCmd, dir, run, func(s string) { e.ui.Say(s) })
}
