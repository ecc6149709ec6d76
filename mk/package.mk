# package.mk — heed as a package others build with (issue 15): make install /
# make uninstall (mk/runtime.mk, scripts/install.sh), the CMake and Meson
# consumers (examples/cmake, examples/meson) and the Python package
# (python/heed), each tested against an install in a scratch prefix.
# Included by the Makefile (which defines CC, CFLAGS, B).

PKG_TEST := $(B)/package-test
PY       := /usr/bin/python3

.PHONY: test-install test-consumers test-python
TEST_TARGETS += test-install test-consumers test-python

# install (twice), SONAME and links, programs against the install, docs, uninstall
test-install: install-files
	MAKE='$(MAKE)' CC='$(CC)' B='$(B)' HEED_VERSION='$(HEED_VERSION)' tests/package/install_test.sh $(CURDIR)/$(PKG_TEST)/install-prefix $(PKG_TEST)/install

# CMake (Unix Makefiles, Ninja) and Meson consumers: build, no-op rebuild, spec change
test-consumers: install-files
	rm -rf $(PKG_TEST)/consumers-prefix
	$(call install_into,$(CURDIR)/$(PKG_TEST)/consumers-prefix)
	tests/package/consumers_test.sh $(CURDIR)/$(PKG_TEST)/consumers-prefix $(PKG_TEST)/consumers

# the Python package from the checkout (python/), then installed; heed.torch's
# tests need Debian's python3-torch (they skip, saying so, where apt cannot install it)
test-python: install-files
	@scripts/deps.sh torch || echo "test-python: python3-torch could not be installed: the heed.torch tests will be skipped"
	rm -rf $(PKG_TEST)/python-prefix $(PKG_TEST)/python-cache
	$(call install_into,$(CURDIR)/$(PKG_TEST)/python-prefix)
	HEED_CACHE=$(CURDIR)/$(PKG_TEST)/python-cache PYTHONPATH=$(CURDIR)/python HEED_LIB=$(CURDIR)/$(B)/libheed.so.0 \
	  $(PY) -m unittest discover -s tests/python -t tests/python -v
	env -u PYTHONDONTWRITEBYTECODE HEED_CACHE=$(CURDIR)/$(PKG_TEST)/python-cache \
	  HEED_TEST_PREFIX=$(CURDIR)/$(PKG_TEST)/python-prefix $(PY) tests/python/installed.py
	@# the bytecode Python wrote beside the installed modules goes with them
	$(MAKE) --no-print-directory uninstall PREFIX=$(CURDIR)/$(PKG_TEST)/python-prefix > /dev/null
	@test ! -e $(PKG_TEST)/python-prefix || { echo "test-python: left after uninstall:"; find $(PKG_TEST)/python-prefix; exit 1; }
