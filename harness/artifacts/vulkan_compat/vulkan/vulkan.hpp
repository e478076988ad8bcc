// Written for harness (harness/artifacts/cmake_build.py): Vulkan C++ headers older than 1.3.261
// (Debian 12 ships 1.3.239) lack VK_EXT_layer_settings, whose three C++ types llama.cpp's Vulkan
// backend names when it sets up the validation layer. This header is put first on the include
// path of host Vulkan builds: it includes the system's vulkan.hpp and, only when that header does
// not declare the extension, adds the three types with the extension's layout (sType
// VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT = 1000496000). With newer headers it adds
// nothing.
#pragma once
#include_next <vulkan/vulkan.hpp>
#ifndef VK_EXT_layer_settings
namespace VULKAN_HPP_NAMESPACE {
enum class LayerSettingTypeEXT : int32_t {
  eBool32 = 0,
  eInt32 = 1,
  eInt64 = 2,
  eUint32 = 3,
  eUint64 = 4,
  eFloat32 = 5,
  eFloat64 = 6,
  eString = 7
};
struct LayerSettingEXT {
  const char* pLayerName;
  const char* pSettingName;
  LayerSettingTypeEXT type;
  uint32_t valueCount;
  const void* pValues;
};
struct LayerSettingsCreateInfoEXT {
  StructureType sType = static_cast<StructureType>(1000496000);
  const void* pNext = nullptr;
  uint32_t settingCount = 0;
  const LayerSettingEXT* pSettings = nullptr;
  explicit LayerSettingsCreateInfoEXT(const std::vector<LayerSettingEXT>& settings)
      : settingCount(static_cast<uint32_t>(settings.size())), pSettings(settings.data()) {}
};
}  // namespace VULKAN_HPP_NAMESPACE
#endif
