# shellcheck shell=bash
# A server or tool the scripts need, from Debian's packages: source this file, then call
# debian_package_install PACKAGE WHAT (as root with apt-get: installs PACKAGE; otherwise
# says how and fails). The caller checks first whether it is already there.

debian_package_install() {
  local package="$1" what="$2"
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "$what is required: install it (Debian: apt-get install $package)" >&2
    return 1
  fi
  echo "Installing $package from the Debian packages" >&2
  { apt-get install -y -q "$package" || { apt-get update -q && apt-get install -y -q "$package"; }; } >&2 || return 1
}
