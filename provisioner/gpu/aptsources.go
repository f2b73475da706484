package gpu

import (
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/aptsource"
)

// componentsSources is the file the provisioner writes to enable more
// components of the image's own archive. The image's files are left alone;
// its "podvm-" name keeps it out of aptsource.ArchiveOf on a rerun.
const componentsSources = "/etc/apt/sources.list.d/podvm-archive-components.sources"

// cmdListSources prints every apt source file of the image, each after a
// marker line naming it, so one round trip reads them all.
const cmdListSources = `for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do ` +
	`[ -f "$f" ] || continue; echo "` + sourceMarker + `$f"; cat "$f"; echo; done`

const sourceMarker = "#### podvm-gpu source file: "

// parseSourceFiles splits the output of cmdListSources and parses each file.
func parseSourceFiles(out string) ([]aptsource.Source, error) {
	var sources []aptsource.Source
	var file string
	var body strings.Builder
	finish := func() error {
		if file == "" {
			return nil
		}
		srcs, err := aptsource.ParseFile(file, body.String())
		sources = append(sources, srcs...)
		body.Reset()
		return err
	}
	for _, l := range strings.SplitAfter(out, "\n") {
		if name, ok := strings.CutPrefix(l, sourceMarker); ok {
			if err := finish(); err != nil {
				return nil, err
			}
			file = strings.TrimSpace(name)
			continue
		}
		body.WriteString(l)
	}
	return sources, finish()
}

// componentsFile is the extra sources file that adds the wanted components
// the image's archive entries lack; "" when nothing is missing.
func componentsFile(archive []aptsource.Source, want []string) string {
	missing := aptsource.MissingComponents(archive, want)
	if len(missing) == 0 {
		return ""
	}
	return aptsource.Render("Written by podvm-gpu: components of the image's archive the GPU stack needs.", missing)
}
