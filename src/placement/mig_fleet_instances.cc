// MIG requests in the simulated fleet: an idle instance of the profile if one is free (not in a
// reservation), else by demand one the planner makes (mig::ChooseInstance), else a wait; the
// first waiting request larger than one compute slice holds a reservation (mig::ChooseReservation)
// until it starts, so smaller ones cannot take its slices forever.
#include <algorithm>

#include "placement/mig_fleet_state.h"

namespace tessera::placement {

bool MigFleetState::TakeIdle(const mig::Profile& profile, MigWork& work) {
  if (idle_[profile.id % idle_.size()] <= 0) return false;
  int best_gpu = -1;
  size_t best_instance = 0;
  for (size_t g = 0; g < shape_.size(); ++g) {
    const mig::ShapeGpu& gpu = shape_[g];
    if (!gpu.table || !gpu.placeable) continue;
    if (best_gpu >= 0 && gpus_[g].busy_compute_slices <= gpus_[best_gpu].busy_compute_slices)
      continue;  // the fullest GPU first, so that idle GPUs stay free
    for (size_t i = 0; i < gpu.instances.size(); ++i) {
      const mig::LiveInstance& instance = gpu.instances[i];
      if (instance.busy || instance.profile_id != profile.id) continue;
      bool reserved = std::any_of(gpu.reserved.begin(), gpu.reserved.end(), [&](const auto& r) {
        return mig::Overlaps(r, instance.placement);
      });
      if (reserved) continue;
      best_gpu = static_cast<int>(g);
      best_instance = i;
      break;
    }
  }
  if (best_gpu < 0) return false;
  mig::LiveInstance& instance = shape_[best_gpu].instances[best_instance];
  instance.busy = true;
  --idle_[profile.id % idle_.size()];
  gpus_[best_gpu].busy_compute_slices += profile.compute_slices;
  work.gpus = {best_gpu};
  work.gpu_instance_id = instance.gpu_instance_id;
  return true;
}

bool MigFleetState::MakeInstance(const mig::Profile& profile, MigWork& work) {
  auto choice = mig::ChooseInstance(shape_, profile.name);
  if (!choice) return false;
  mig::ShapeGpu& gpu = shape_[choice->gpu];
  for (uint32_t id : choice->step.destroy) {
    auto it = std::find_if(gpu.instances.begin(), gpu.instances.end(),
                           [&](const mig::LiveInstance& i) { return i.gpu_instance_id == id; });
    if (it == gpu.instances.end()) continue;
    --idle_[it->profile_id % idle_.size()];
    gpu.instances.erase(it);
    ++destroyed_;
  }
  Gpu& state = gpus_[choice->gpu];
  if (!state.mig_mode) {
    state.mig_mode = true;
    ++mode_changes_;
  }
  mig::LiveInstance instance;
  instance.gpu_instance_id = state.next_id++;
  instance.profile_id = profile.id;
  instance.placement = choice->step.create.placement;
  instance.busy = true;
  gpu.instances.push_back(instance);
  ++created_;
  state.busy_compute_slices += profile.compute_slices;
  work.gpus = {static_cast<int>(choice->gpu)};
  work.gpu_instance_id = instance.gpu_instance_id;
  return true;
}

void MigFleetState::Reserve(size_t request, std::string_view profile) {
  auto reservation = mig::ChooseReservation(shape_, profile);
  if (!reservation) return;
  shape_[reservation->gpu].reserved.push_back(reservation->placement);
  reservation_ = Held{request, reservation->gpu, reservation->placement};
}

bool MigFleetState::PlaceMig(size_t request, std::string_view profile_name, MigWork& work) {
  const mig::Profile* profile = table_->FindByName(profile_name);
  if (!profile) return false;
  const bool holder = reservation_ && reservation_->request == request;
  if (holder) shape_[reservation_->gpu].reserved.clear();
  if (TakeIdle(*profile, work) || (by_demand_ && MakeInstance(*profile, work))) {
    if (holder) reservation_.reset();
    return true;
  }
  if (holder) {
    shape_[reservation_->gpu].reserved.push_back(reservation_->placement);
  } else if (by_demand_ && !reservation_ && profile->compute_slices > 1) {
    Reserve(request, profile_name);
  }
  return false;
}

void MigFleetState::Release(const MigWork& work) {
  for (int g : work.gpus) {
    Gpu& gpu = gpus_[g];
    if (gpu.whole_busy) {
      gpu.whole_busy = false;
      Refresh(g);
    } else if (gpu.shares > 0) {
      gpu.memory_gib -= work.memory_gib;
      gpu.compute -= work.compute;
      if (--gpu.shares == 0) {
        gpu.memory_gib = gpu.compute = 0;
        Refresh(g);
      }
    } else {
      for (mig::LiveInstance& instance : shape_[g].instances) {
        if (instance.gpu_instance_id != work.gpu_instance_id || !instance.busy) continue;
        instance.busy = false;
        ++idle_[instance.profile_id % idle_.size()];
        gpu.busy_compute_slices -= table_->FindById(instance.profile_id)->compute_slices;
      }
    }
  }
}

}  // namespace tessera::placement
