package gpu

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/debcache"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
)

// generatedChrootDir is the host path of the podvm-rootfs builder's tree
// (rootfs.GeneratedChrootDir).
const generatedChrootDir = "PodvmChrootDir"

// useCaches settles, once, the build cache directory (cacheRoot, "" when
// build_cache=no or the directory is unfit) and, where the image is the
// podvm-rootfs chroot on this host, its root and the deb cache (a remote
// VM downloads from its own mirrors).
func (e *executor) useCaches(c gpustack.BuildCache) {
	if root, _ := e.generated[generatedChrootDir].(string); e.generated[generatedChroot] == "true" && filepath.IsAbs(root) {
		e.chrootRoot = root
	}
	if c.Mode == cachedir.ModeNo {
		return
	}
	root, err := cachedir.Open(c.Dir)
	if err != nil {
		e.ui.Say(fmt.Sprintf("build cache: off: %v", err))
		return
	}
	e.cacheRoot = root
	if e.chrootRoot != "" {
		e.debs = debcache.New(root, c.MaxSize)
	}
}

// withDebs runs an apt command that downloads into the image's archive
// directory archives (a path in the image) through the deb cache; see
// debcache.Store.Around.
func (e *executor) withDebs(ctx context.Context, aptCmd, archives string, run func() error) error {
	if e.debs == nil {
		return run()
	}
	dir := func() (string, error) { return chroot.ResolveIn(e.chrootRoot, archives) }
	query := func(cmd string) (string, error) { return e.r.query(ctx, cmd) }
	return e.debs.Around(query, aptCmd, dir, run, func(s string) { e.ui.Say(s) })
}
