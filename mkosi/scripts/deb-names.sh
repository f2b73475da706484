for f in "$repo"/*%3a*.deb; do
	[ -e "$f" ] || continue
	mv "$f" "$(echo "$f" | sed 's/_[0-9]*%3a/_/')"
done
chmod 0644 "$repo"/*.deb
