# `cmake --install` and the .deb (scripts/package): the programs in bin/, the data in
# share/decoderscope/ (models/, lessons/ and whatever else assets/ holds but the README's
# screenshots; shaders/; fonts/ as links to Debian's DejaVu fonts), the menu entry, the
# icon (drawn by ds_make_icon at build time) and the man pages. The programs find the data
# from their own folder (core/util/data_dir.h).
include(GNUInstallDirs)
set(DS_SHARE ${CMAKE_INSTALL_DATADIR}/decoderscope)
install(TARGETS decoderscope-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/assets/ DESTINATION ${DS_SHARE} PATTERN screenshots EXCLUDE)
install(FILES ${CMAKE_SOURCE_DIR}/app/desktop/decoderscope-cli.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
if(DS_GUI)
  install(TARGETS decoderscope RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/shaders/ DESTINATION ${DS_SHARE}/shaders)
  install(FILES ${CMAKE_SOURCE_DIR}/app/desktop/decoderscope.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  install(FILES ${CMAKE_SOURCE_DIR}/app/desktop/decoderscope.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  # The icon: a causal attention pattern, drawn by a small program (same bytes every build).
  add_executable(ds_make_icon ${CMAKE_SOURCE_DIR}/app/desktop/make_icon.cpp)
  target_link_libraries(ds_make_icon PRIVATE PkgConfig::STB)
  target_compile_options(ds_make_icon PRIVATE ${DS_WARN})
  set(DS_ICON_DIR ${CMAKE_BINARY_DIR}/icons)
  set(DS_ICON_SIZES 48 128 256)
  set(DS_ICONS ${DS_ICON_DIR}/decoderscope.svg)
  foreach(n ${DS_ICON_SIZES})
    list(APPEND DS_ICONS ${DS_ICON_DIR}/decoderscope-${n}.png)
  endforeach()
  add_custom_command(OUTPUT ${DS_ICONS}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${DS_ICON_DIR}
    COMMAND ds_make_icon ${DS_ICON_DIR} ${DS_ICON_SIZES}
    DEPENDS ds_make_icon COMMENT "Drawing the icon")
  add_custom_target(ds_icons ALL DEPENDS ${DS_ICONS})
  foreach(n ${DS_ICON_SIZES})
    install(FILES ${DS_ICON_DIR}/decoderscope-${n}.png DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/${n}x${n}/apps
            RENAME decoderscope.png)
  endforeach()
  install(FILES ${DS_ICON_DIR}/decoderscope.svg DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
  # The window's fonts: links to the DejaVu fonts of Debian's fonts-dejavu-core (a
  # dependency of the package), which the window also reads directly when fonts/ is absent.
  foreach(font DejaVuSans.ttf DejaVuSansMono.ttf)
    install(CODE "file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${DS_SHARE}/fonts\")
file(CREATE_LINK /usr/share/fonts/truetype/dejavu/${font}
     \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${DS_SHARE}/fonts/${font}\" SYMBOLIC)")
  endforeach()
endif()

# ---- the Debian package: scripts/package (cpack -G DEB in the build folder)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME decoderscope)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "decoderscope maintainers <decoderscope@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "watch a transformer decoder write text one token at a time")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "A desktop tool for teaching how a transformer decoder writes text, one token at a time.\n A small engine runs a real model; the window shows its attention, residual stream,\n logits and the token drawn, and lets a class step forward, step back and ask what if.\n Comes with small built-in models, decoderscope-cli and man pages.")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # decoderscope_0.1_amd64.deb
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# The shared libraries' packages come from dpkg-shlibdeps (dpkg-dev); the rest by hand:
# libGL (which GLFW opens at run time), the fonts the window draws with and Mesa's
# drivers for its OpenGL 3.3 context.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libgl1, fonts-dejavu-core, libgl1-mesa-dri")
include(CPack)
