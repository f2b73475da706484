# mkosi passes its configuration to a configure script as JSON on stdin
# and builds with the JSON the script prints. systemd-repart derives the
# disk's partition and file system UUIDs from Seed=, but leaves mke2fs's
# directory hash seed random: two builds of the same inputs then differ in
# the root's superblock. This derives it from Seed= too, so the disk is
# random when Seed= is and reproducible when Seed= is fixed. The -E options
# before it are repart's own for an image file (mke2fs takes the last -E).
# A SYSTEMD_REPART_MKFS_OPTIONS_EXT4 of the user's is kept as it is.
set -eu
if ! command -v jq >/dev/null 2>&1; then
	echo "mkosi.configure: jq not found; the root file system's directory hash seed stays random (docs/mkosi.md, \"Reproducible builds\")" >&2
	exec cat
fi
exec jq 'if (.Seed | type) != "string" or .Environment.SYSTEMD_REPART_MKFS_OPTIONS_EXT4 != null then .
	else .Environment.SYSTEMD_REPART_MKFS_OPTIONS_EXT4 = "-E discard,lazy_itable_init=1,hash_seed=\(.Seed)" end'
