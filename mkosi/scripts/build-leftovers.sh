# The layer's commands in the image (apt for the hold and the repository's
# self-test, ldconfig and update-alternatives from package scripts) leave
# caches and a log that carry the build's time and inode numbers: two builds
# from the same inputs would differ by them alone. apt and ldconfig
# rebuild their caches when needed; the log says only what the build did.
echo '[tidy] Caches and logs of the build that differ from build to build'
rm -f "$BUILDROOT/var/cache/apt/pkgcache.bin" "$BUILDROOT/var/cache/apt/srcpkgcache.bin" \
	"$BUILDROOT/var/cache/ldconfig/aux-cache" "$BUILDROOT/var/log/alternatives.log"
