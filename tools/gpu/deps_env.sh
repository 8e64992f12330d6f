# shellcheck shell=bash
# Sourced on the GPU machine (by tools/gpu/check.sh): unpacks the Debian packages carried in
# third_party/debs (see tools/gpu/fetch_deps.sh) into /opt/pdeps and points CMake, pkg-config
# and the loader at them. Nothing is installed into / (the image's own libraries stay as they are).
if [ -d third_party/debs ] && ls third_party/debs/*.deb >/dev/null 2>&1; then
  PDEPS=${PDEPS:-/opt/pdeps}
  if [ ! -d "$PDEPS/usr" ]; then
    mkdir -p "$PDEPS"
    for f in third_party/debs/*.deb; do dpkg -x "$f" "$PDEPS"; done
    for pc in "$PDEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$PDEPS"/usr/share/pkgconfig/*.pc; do
      [ -f "$pc" ] && sed -i "s#^prefix=/usr#prefix=$PDEPS/usr#; s#=/usr/#=$PDEPS/usr/#g" "$pc"
    done
  fi
  export PKG_CONFIG_PATH=$PDEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$PDEPS/usr/share/pkgconfig
  export CMAKE_PREFIX_PATH=$PDEPS/usr
  export LD_LIBRARY_PATH=$PDEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
