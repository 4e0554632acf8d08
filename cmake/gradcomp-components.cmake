# gradcomp's components, included by the package configuration after gradcomp::gradcomp is
# defined: gradcomp-config.cmake (CMake install, vcpkg) and, in the Conan package, the build
# module that CMakeDeps' configuration includes (conanfile.py).
#
# One component, cuda: gradcomp::cuda, the CUDA backend. It needs the calling project to
# have enabled CUDA itself (project(<name> LANGUAGES CXX CUDA) or enable_language(CUDA)); the
# package never enables a language. Asked for (COMPONENTS cuda), it is there or the package
# is not found, with the reason: installed without its CUDA backend, CUDA not enabled (and
# whether a CUDA compiler exists at all), or no CUDA toolkit. Not asked for, gradcomp::cuda is
# defined where it can be, and the package is found either way.
#
# In: _gradcomp_cuda_targets, the exported targets file that defines gradcomp::cuda (CMake
# package; the package was installed without CUDA where it does not exist), or empty where
# gradcomp::cuda is already declared and only needs CUDA's usage requirements (Conan).
# Out: gradcomp_cuda_FOUND; where a component asked for is missing, gradcomp_FOUND FALSE
# and gradcomp_NOT_FOUND_MESSAGE (CMake prints it after "Reason given by package").

set(gradcomp_cuda_FOUND FALSE)
set(_gradcomp_cuda_missing "")
get_property(_gradcomp_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(_gradcomp_cuda_targets AND NOT EXISTS "${_gradcomp_cuda_targets}")
  get_filename_component(_gradcomp_dir "${_gradcomp_cuda_targets}" DIRECTORY)
  set(_gradcomp_cuda_missing
      "this gradcomp (${_gradcomp_dir}) was installed without its CUDA backend: install it from a build configured with a CUDA compiler (vcpkg: gradcomp[cuda]).")
  unset(_gradcomp_dir)
elseif(NOT "CUDA" IN_LIST _gradcomp_languages)
  # Checked through ENABLED_LANGUAGES rather than CMAKE_CUDA_COMPILER alone, which a user
  # may set without enabling the language. Where the CUDA toolkit is missing, say so: CMake
  # looks for nvcc in CUDACXX, on the PATH and in CUDA_PATH/bin.
  if(DEFINED CMAKE_CUDA_COMPILER AND EXISTS "${CMAKE_CUDA_COMPILER}")
    set(_gradcomp_nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(NOT "$ENV{CUDACXX}" STREQUAL "")
    set(_gradcomp_nvcc "$ENV{CUDACXX}")
  else()
    find_program(_gradcomp_nvcc nvcc HINTS "$ENV{CUDA_PATH}/bin" NO_CACHE)
  endif()
  if(_gradcomp_nvcc)
    set(_gradcomp_cuda_missing
        "the project has not enabled CUDA: call project(<name> LANGUAGES CXX CUDA) or enable_language(CUDA) before find_package(gradcomp) (a CUDA compiler is there: ${_gradcomp_nvcc}).")
  else()
    set(_gradcomp_cuda_missing
        "no CUDA compiler was found: the CUDA toolkit is missing, or its nvcc is neither on the PATH nor named by CUDACXX. With the toolkit, enable CUDA in the project (project(<name> LANGUAGES CXX CUDA)) before find_package(gradcomp).")
  endif()
  unset(_gradcomp_nvcc)
else()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(_gradcomp_cuda_missing "the CUDA toolkit was not found (find_package(CUDAToolkit) failed).")
  else()
    if(_gradcomp_cuda_targets)
      include("${_gradcomp_cuda_targets}")
    else()
      set_property(TARGET gradcomp::cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::cudart)
      set_property(TARGET gradcomp::cuda APPEND PROPERTY INTERFACE_COMPILE_FEATURES cuda_std_20)
    endif()
    # CMake < 3.25.2 does not know nvcc's C++20 switch: replace the compile feature by the
    # flag itself.
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
      get_target_property(_gradcomp_features gradcomp::cuda INTERFACE_COMPILE_FEATURES)
      if(_gradcomp_features)
        list(REMOVE_ITEM _gradcomp_features cuda_std_20)
        set_property(TARGET gradcomp::cuda PROPERTY INTERFACE_COMPILE_FEATURES "${_gradcomp_features}")
      endif()
      set_property(TARGET gradcomp::cuda APPEND PROPERTY
        INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
      unset(_gradcomp_features)
    endif()
    set(gradcomp_cuda_FOUND TRUE)
  endif()
endif()
unset(_gradcomp_languages)

set(_gradcomp_reasons "")
foreach(_gradcomp_component IN LISTS gradcomp_FIND_COMPONENTS)
  if(_gradcomp_component STREQUAL "cuda")
    if(NOT gradcomp_cuda_FOUND AND gradcomp_FIND_REQUIRED_cuda)
      string(APPEND _gradcomp_reasons "gradcomp component cuda (gradcomp::cuda) is not available: ${_gradcomp_cuda_missing}\n")
    endif()
  else()
    set(gradcomp_${_gradcomp_component}_FOUND FALSE)
    if(gradcomp_FIND_REQUIRED_${_gradcomp_component})
      string(APPEND _gradcomp_reasons "gradcomp has no component '${_gradcomp_component}' (its one component is cuda).\n")
    endif()
  endif()
endforeach()
if(_gradcomp_reasons)
  set(gradcomp_FOUND FALSE)
  set(gradcomp_NOT_FOUND_MESSAGE "${_gradcomp_reasons}")
endif()
unset(_gradcomp_component)
unset(_gradcomp_reasons)
unset(_gradcomp_cuda_missing)
