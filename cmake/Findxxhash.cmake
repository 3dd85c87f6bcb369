# Findxxhash: locate the xxHash library (Debian libxxhash-dev ships no CMake config).
# Defines the imported target xxhash::xxhash.
include(FindPackageHandleStandardArgs)
find_path(XXHASH_INCLUDE_DIR NAMES xxhash.h)
find_library(XXHASH_LIBRARY NAMES xxhash)
find_package_handle_standard_args(xxhash REQUIRED_VARS XXHASH_INCLUDE_DIR XXHASH_LIBRARY)
if(xxhash_FOUND AND NOT TARGET xxhash::xxhash)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES
    IMPORTED_LOCATION "${XXHASH_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
endif()
mark_as_advanced(XXHASH_INCLUDE_DIR XXHASH_LIBRARY)
