// tensor::from_dlpack, to_dlpack and to_dlpack_copy: lockstep's tensors to
// and from DLPack 0.6 managed tensors (docs/interop.md), without a copy.
//
// In: a compact, element-aligned buffer becomes a device_buffer whose
// shared_ptr deleter calls the producer's deleter, so every handle and view
// of the tensor keeps the producer's memory alive and the last one releases
// it, once (for CUDA memory after lockstep's work on it has finished). Other
// host buffers are copied into a compact tensor, and released at once.
// Out: a managed tensor whose context holds a handle to the tensor, which
// keeps lockstep's buffer alive until the consumer calls the deleter.

#include "lockstep/tensor.hpp"

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

#include "devices/device_registry.hpp"
#include "runtime/log.hpp"

#if LOCKSTEP_HAVE_CUDA
#include "devices/cuda/cuda_places.hpp"
#endif

#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

static_assert(DLPACK_VERSION >= 60, "lockstep needs DLPack 0.6 or later (kDLCUDA)");

namespace lockstep {

namespace {

// -- dtypes ---------------------------------------------------------------------

DLDataType dl_dtype_of(dtype type) {
  const auto bits = static_cast<std::uint8_t>(8 * size_of(type));
  switch (type) {
    case dtype::f16:
    case dtype::f32:
    case dtype::f64:
      return {kDLFloat, bits, 1};
    case dtype::bf16:
      return {kDLBfloat, bits, 1};
    case dtype::i32:
    case dtype::i64:
      return {kDLInt, bits, 1};
  }
  throw dtype_error("to_dlpack: invalid dtype");
}

std::optional<dtype> dtype_of_dl(DLDataType type) {
  if (type.lanes != 1)
    return std::nullopt;
  for (auto candidate : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16, dtype::bf16}) {
    const auto dl = dl_dtype_of(candidate);
    if (dl.code == type.code && dl.bits == type.bits)
      return candidate;
  }
  return std::nullopt;
}

/// "uint8", "complex64", "float32x4" (4 lanes), "type code 9 of 32 bits".
std::string dl_dtype_name(DLDataType type) {
  std::string name;
  switch (type.code) {
    case kDLInt:
      name = "int";
      break;
    case kDLUInt:
      name = "uint";
      break;
    case kDLFloat:
      name = "float";
      break;
    case kDLBfloat:
      name = "bfloat";
      break;
    case kDLComplex:
      name = "complex";
      break;
    case kDLOpaqueHandle:
      name = "opaque handle of ";
      break;
    default:
      name = "type code " + std::to_string(type.code) + " of ";
  }
  name += std::to_string(type.bits);
  if (type.code == kDLOpaqueHandle || type.code > kDLComplex)
    name += " bits";
  if (type.lanes != 1)
    name += "x" + std::to_string(type.lanes) + " (" + std::to_string(type.lanes) + " lanes)";
  return name;
}

// -- devices --------------------------------------------------------------------

/// The device type as the integer the producer stored. A C producer may
/// store a value that is none of DLDeviceType's enumerators (a newer
/// DLPack's device, or garbage), which is no valid value of the C++ enum:
/// it is read as the bytes of the enum's underlying type.
int device_type_of(const DLDevice& device) {
  std::underlying_type_t<DLDeviceType> value;
  std::memcpy(&value, &device.device_type, sizeof value);
  return static_cast<int>(value);
}

/// "kDLCPU", "kDLOpenCL", ..., "device type 42".
std::string dl_device_type_name(int type) {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    case kDLOpenCL:
      return "kDLOpenCL";
    case kDLVulkan:
      return "kDLVulkan";
    case kDLMetal:
      return "kDLMetal";
    case kDLVPI:
      return "kDLVPI";
    case kDLROCM:
      return "kDLROCM";
    case kDLROCMHost:
      return "kDLROCMHost";
    case kDLExtDev:
      return "kDLExtDev";
    case kDLCUDAManaged:
      return "kDLCUDAManaged";
  }
  return "device type " + std::to_string(type);
}

/// "kDLCUDA device 1".
std::string dl_device_name(DLDevice device) {
  return dl_device_type_name(device_type_of(device)) + " device "
         + std::to_string(device.device_id);
}

/// Where the memory of a managed tensor goes in lockstep.
struct placement {
  const device_kind* kind;
  device_spec device;
};

/// A host-memory device: `requested` if there is one (device_error unless
/// it is host memory), else the current device if it is host memory, else
/// cpu_device(0).
placement host_placement(DLDevice from, const device_spec* requested) {
  const auto& host = detail::host_kind();
  if (requested) {
    auto device = requested->canonical();
    const auto& kind = detail::kind_of(device);
    if (&kind != &host)
      throw device_error("from_dlpack: " + dl_device_name(from) + " memory is host memory; device "
                         + device.to_string() + " is " + std::string(kind.name)
                         + " memory (name a host-memory device such as /cpu:0)");
    return {&host, std::move(device)};
  }
  const auto& current = current_device();
  if (&detail::kind_of(current) == &host)
    return {&host, current};
  return {&host, cpu_device(0)};
}

/// A logical GPU of the physical CUDA device `from.device_id`: `requested`
/// if there is one (device_error unless it is such a GPU), else the
/// current device if it is one, else the device's first logical GPU.
placement cuda_placement(DLDevice from, const device_spec* requested) {
#if LOCKSTEP_HAVE_CUDA
  const auto* cuda = detail::cuda_kind_if_present();
  if (cuda == nullptr)
    throw device_error("from_dlpack: " + dl_device_name(from)
                       + " memory, but this process sees no CUDA device "
                         "(CUDA_VISIBLE_DEVICES applies)");
  const int physical = from.device_id;
  if (physical < 0 || physical >= detail::physical_cuda_devices())
    throw device_error("from_dlpack: " + dl_device_name(from) + ": there is no CUDA device "
                       + std::to_string(physical) + " (this process sees "
                       + std::to_string(detail::physical_cuda_devices()) + ")");
  const auto on_that_gpu = [&](const device_spec& device) {
    return &detail::kind_of(device) == cuda && detail::place_of(device).physical == physical;
  };
  if (requested) {
    auto device = requested->canonical();
    if (!on_that_gpu(device))
      throw device_error("from_dlpack: " + dl_device_name(from) + " memory cannot be placed on "
                         + device.to_string() + ", which is not a logical GPU of CUDA device "
                         + std::to_string(physical));
    return {cuda, std::move(device)};
  }
  const auto& current = current_device();
  if (on_that_gpu(current))
    return {cuda, current};
  return {cuda, detail::logical_gpus_of(physical).front()};
#else
  (void) requested;
  throw device_error("from_dlpack: " + dl_device_name(from)
                     + " memory, but lockstep was built without the CUDA backend "
                       "(meson option cuda)");
#endif
}

placement placement_of(DLDevice from, const device_spec* requested) {
  switch (device_type_of(from)) {
    case kDLCPU:
    case kDLCUDAHost: // pinned host memory: the host reads it as any other
      return host_placement(from, requested);
    case kDLCUDA:
      return cuda_placement(from, requested);
    default:
      throw device_error("from_dlpack: DLPack device " + dl_device_name(from)
                         + " is not one lockstep can read; it reads kDLCPU, kDLCUDAHost and, "
                           "with its CUDA backend and a device, kDLCUDA");
  }
}

/// Waits until the work lockstep has enqueued on `device` (CUDA memory)
/// has run; nothing for host memory, whose work is done when issued.
void finish_device_work(const placement& where, const char* what) {
#if LOCKSTEP_HAVE_CUDA
  if (where.kind != &detail::host_kind())
    detail::synchronize_place(detail::place_of(where.device), what);
#else
  (void) where;
  (void) what;
#endif
}

// -- ownership of a managed tensor ------------------------------------------------

/// Calls the producer's deleter (if it gave one) when it goes, unless
/// released: a from_dlpack that copies or fails still releases the input.
class managed_owner {
public:
  explicit managed_owner(DLManagedTensor* managed) noexcept : managed_(managed) {}
  ~managed_owner() {
    if (managed_ != nullptr && managed_->deleter != nullptr)
      managed_->deleter(managed_);
  }
  managed_owner(const managed_owner&) = delete;
  managed_owner& operator=(const managed_owner&) = delete;

  DLManagedTensor* release() noexcept { return std::exchange(managed_, nullptr); }

private:
  DLManagedTensor* managed_;
};

/// The deleter of a buffer over producer memory: the last handle's release
/// waits for lockstep's work on CUDA memory, then calls the producer's
/// deleter. Copies of it (shared_ptr's) must not throw: it holds pointers.
struct release_to_producer {
  DLManagedTensor* managed;
#if LOCKSTEP_HAVE_CUDA
  detail::cuda_place* place = nullptr; // set for CUDA memory; places live until exit
#endif

  void operator()(std::byte*) const noexcept {
#if LOCKSTEP_HAVE_CUDA
    if (place != nullptr) {
      try {
        detail::synchronize_place(*place, "from_dlpack: releasing the producer's memory");
      } catch (const std::exception& e) {
        // The device failed; the producer gets its memory back all the same.
        LOCKSTEP_LOG_ERROR("from_dlpack: {}", e.what());
      }
    }
#endif
    if (managed->deleter != nullptr)
      managed->deleter(managed);
  }
};

// -- layout -------------------------------------------------------------------------

/// True when `strides` (null: row-major) describe the row-major layout of
/// `shape`. A dimension of size 1 may have any stride, and a tensor with no
/// elements is compact whatever its strides.
bool is_compact(const shape_t& shape, const std::int64_t* strides, std::int64_t elements) {
  if (strides == nullptr || elements == 0)
    return true;
  std::int64_t expected = 1;
  for (auto k = shape.size(); k-- > 0;) {
    if (shape[k] != 1 && strides[k] != expected)
      return false;
    expected *= shape[k];
  }
  return true;
}

/// "[4, 1]".
std::string strides_text(const std::int64_t* strides, std::size_t rank) {
  return shape_to_string(shape_t(strides, strides + rank));
}

/// Copies the elements of the strided host array at `start` (strides in
/// elements, any sign) into `destination` in row-major order.
void gather_strided(std::byte* destination, const std::byte* start, const shape_t& shape,
                    const std::int64_t* strides, std::size_t element_size,
                    std::int64_t elements) {
  const auto rank = shape.size();
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t offset = 0; // of the current element, in elements
  for (std::int64_t n = 0; n < elements; ++n) {
    std::memcpy(destination + static_cast<std::size_t>(n) * element_size,
                start + offset * static_cast<std::int64_t>(element_size), element_size);
    // The next index, last dimension fastest.
    for (auto k = rank; k-- > 0;) {
      if (++index[k] < shape[k]) {
        offset += strides[k];
        break;
      }
      offset -= (shape[k] - 1) * strides[k];
      index[k] = 0;
    }
  }
}

// -- out ----------------------------------------------------------------------------

/// A managed tensor and what it points at: the handle that keeps the
/// buffer alive and the shape. The managed tensor comes first, so its
/// address is the context's.
struct exported_tensor {
  DLManagedTensor managed{};
  tensor source;
  shape_t shape;
};

void delete_exported(DLManagedTensor* self) {
  delete static_cast<exported_tensor*>(self->manager_ctx);
}

DLManagedTensor* export_tensor(const tensor& source) {
  const auto& kind = detail::kind_of(source);
  DLDevice device{kDLCPU, 0};
  if (&kind != &detail::host_kind()) {
#if LOCKSTEP_HAVE_CUDA
    if (&kind == detail::cuda_kind_if_present()) {
      auto& place = detail::place_of(source.device());
      // The consumer may read on any stream: lockstep's writes are done first.
      detail::synchronize_place(place, "to_dlpack");
      device = {kDLCUDA, place.physical};
    } else
#endif
      throw device_error("to_dlpack: the buffer of this " + std::string(to_string(source.dtype()))
                         + shape_to_string(source.shape()) + " tensor is in "
                         + std::string(kind.name) + " memory of device "
                         + source.device().to_string()
                         + ", which DLPack cannot describe; copy it to the host with "
                           "to(device), e.g. t.to(\"/cpu:0\")");
  }
  std::unique_ptr<exported_tensor> exported{
    new exported_tensor{DLManagedTensor{}, source, source.shape()}};
  auto& dl = exported->managed.dl_tensor;
  dl.data = source.buffer().data();
  dl.device = device;
  dl.ndim = static_cast<int>(exported->shape.size());
  dl.dtype = dl_dtype_of(source.dtype());
  dl.shape = exported->shape.data();
  dl.strides = nullptr; // compact, row-major
  dl.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_exported;
  return &exported.release()->managed;
}

} // namespace

// -- in -------------------------------------------------------------------------------

tensor tensor::from_dlpack(DLManagedTensor* managed) {
  return from_dlpack_on(managed, nullptr);
}

tensor tensor::from_dlpack(DLManagedTensor* managed, const device_spec& device) {
  return from_dlpack_on(managed, &device);
}

tensor tensor::from_dlpack_on(DLManagedTensor* managed, const device_spec* device) {
  if (managed == nullptr)
    throw value_error("from_dlpack: the DLManagedTensor pointer is null");
  managed_owner owner{managed};
  const DLTensor& dl = managed->dl_tensor;

  const auto type = dtype_of_dl(dl.dtype);
  if (!type)
    throw dtype_error("from_dlpack: DLPack dtype " + dl_dtype_name(dl.dtype)
                      + " has no lockstep dtype; lockstep has float16, bfloat16, float32, "
                        "float64, int32 and int64, one lane each");
  if (dl.ndim < 0)
    throw value_error("from_dlpack: ndim is " + std::to_string(dl.ndim) + "; it must be >= 0");
  if (dl.ndim > 0 && dl.shape == nullptr)
    throw value_error("from_dlpack: the shape pointer is null for ndim "
                      + std::to_string(dl.ndim));
  const auto rank = static_cast<std::size_t>(dl.ndim);
  shape_t shape(dl.shape, dl.shape + rank);
  const auto where = placement_of(dl.device, device);

  // The shape is checked (shape_error) before any buffer is made.
  tensor result = [&] {
    try {
      return tensor(*type, std::move(shape), where.device, device_buffer{});
    } catch (const shape_error& e) {
      throw shape_error("from_dlpack: " + std::string(e.what()));
    }
  }();
  const auto bytes = result.byte_size();
  if (bytes != 0 && dl.data == nullptr)
    throw value_error("from_dlpack: the data pointer is null for " + std::to_string(bytes)
                      + " bytes of shape " + shape_to_string(result.shape_));
  auto* start = dl.data == nullptr ? nullptr
                                   : static_cast<std::byte*>(dl.data) + dl.byte_offset;
  const bool compact = is_compact(result.shape_, dl.strides, result.num_elements_);
  const bool aligned = bytes == 0 || reinterpret_cast<std::uintptr_t>(start) % size_of(*type) == 0;

  if (compact && aligned) {
    release_to_producer release{managed};
#if LOCKSTEP_HAVE_CUDA
    if (where.kind != &detail::host_kind())
      release.place = &detail::place_of(where.device);
#endif
    owner.release();
    // On bad_alloc, shared_ptr calls `release` itself: the deleter still runs once.
    result.buffer_ = device_buffer(std::shared_ptr<std::byte>(start, release), bytes, *where.kind,
                                   where.kind->host_accessible);
    return result;
  }

  // A copy into lockstep's own memory; `owner` releases the input after it.
  if (!compact && where.kind != &detail::host_kind())
    throw value_error("from_dlpack: " + dl_device_name(dl.device) + " memory of shape "
                      + shape_to_string(result.shape_) + " with strides "
                      + strides_text(dl.strides, rank)
                      + " is not compact (row-major); lockstep copies strided memory only on "
                        "the host: make it contiguous first (libtorch: .contiguous())");
  result.buffer_ = detail::allocate_buffer(*where.kind, result.device_, bytes);
  if (compact)
    detail::copy_between(*where.kind, *where.kind)(result.device_, result.buffer_.data(),
                                                   result.device_, start, bytes);
  else
    gather_strided(result.buffer_.data(), start, result.shape_, dl.strides, size_of(*type),
                   result.num_elements_);
  finish_device_work(where, "from_dlpack: copying the producer's memory");
  return result;
}

// -- out --------------------------------------------------------------------------------

DLManagedTensor* tensor::to_dlpack() const {
  return export_tensor(*this);
}

DLManagedTensor* tensor::to_dlpack_copy() const {
  return export_tensor(copy());
}

} // namespace lockstep
