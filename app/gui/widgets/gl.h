#pragma once
// OpenGL 3.3 core through libGL's own prototypes (no loader library), and GLFW.
#ifndef GL_GLEXT_PROTOTYPES
#define GL_GLEXT_PROTOTYPES 1
#endif
#ifndef GLFW_INCLUDE_GLCOREARB
#define GLFW_INCLUDE_GLCOREARB
#endif
#include <GLFW/glfw3.h>
