#!/bin/sh
# As the official image's entrypoint: a server subcommand logs to stderr; anything else is
# passed to weed as it is.
case "$1" in
  master|volume|server|mini|filer|s3) exec weed -logtostderr=true "$@" ;;
  *) exec weed "$@" ;;
esac
