package gpu

import (
	"context"
	"io"
	"os"

	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
)

// buildModules builds the DKMS modules, through the build host's module
// cache where build_cache allows it for this target.
func (e *executor) buildModules(ctx context.Context, a gpustack.BuildModules) error {
	var c *modcache.Cache
	if e.cacheRoot != "" && (e.plan.Cache.Mode == "yes" || e.chrootRoot != "") {
		c = modcache.New(modcache.Dir(e.cacheRoot), e.plan.Cache.MaxSize)
	} else if e.cacheRoot != "" {
		e.ui.Say("module cache: off, the image is not on this host (build_cache=auto); build_cache=yes copies builds over the communicator")
	}
	return modcache.Build(ctx, commTarget{e.r}, c, a.Kernels, func(s string) { e.ui.Say(s) })
}

// commTarget is the image behind the communicator.
type commTarget struct{ r *runner }

func (t commTarget) Run(ctx context.Context, command string) error {
	_, err := t.r.run(ctx, command)
	return err
}

func (t commTarget) Output(ctx context.Context, command string) (string, error) {
	return t.r.query(ctx, command)
}

// Upload stages the file as the communicator's user, then moves it into
// place, as writeFile does.
func (t commTarget) Upload(ctx context.Context, path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	staged := t.r.stagePath(baseName(path))
	err = t.r.retry(ctx, "uploading "+staged, func() error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		info := os.FileInfo(stagedInfo{name: baseName(staged), size: fi.Size()})
		return transfer(ctx, func() error { return t.r.comm.Upload(staged, f, &info) })
	})
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		_, err = t.r.run(ctx, "mv -f "+shellQuote(staged)+" "+shellQuote(path))
	}
	if err != nil {
		t.r.removeStaged(staged)
	}
	return err
}

func (t commTarget) Download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error {
	return t.r.download(ctx, path, open)
}
