// Submissions: containers as tenants ask for them (accepted pending, with an Idempotency-Key
// scoped to the tenancy's incarnation), their records and pages of them, deletion (a stop for the
// scheduler) and logs. Every replica accepts them; placing them is the scheduler's.
#pragma once

#include <string>

#include "backends/backend.h"
#include "serve/gpus.h"
#include "serve/model.h"
#include "serve/types.h"

namespace tessera::serve {

class Submissions {
 public:
  Submissions(Model& model, const Gpus& gpus, backends::ContainerBackend& backend)
      : model_(model), gpus_(gpus), backend_(backend) {}

  void Submit(const Caller& caller, fleet::ContainerSpec spec, std::string idempotency_key,
              Done<SubmitResult> done);
  Result<fleet::ContainerRecord> Get(const Caller& caller, const std::string& id) const;
  // InvalidArgument when `after` names no container the caller sees.
  Result<ContainerPage> List(const Caller& caller, const ContainerQuery& query) const;
  void Delete(const Caller& caller, const std::string& id, Done<fleet::ContainerRecord> done);
  // Blocks on the backend.
  Result<backends::LogPart> LogsFrom(const Caller& caller, const std::string& id, uint64_t offset);
  // The queue after the last scheduling pass; a tenant sees its own entries (with their global
  // positions) and its own tenancy's share.
  QueueView Queue(const Caller& caller) const;

  // mu held: `stopped`'s request submitted again as a new pending container (a GPU fault stopped
  // it and its tenancy asks for that): its record goes into `out`; it joins the queue once the
  // commit of `out` has ended (AdmitResubmitted). Returns the new ID.
  Result<std::string> ResubmitLocked(const fleet::ContainerRecord& stopped,
                                     std::vector<fleet::Mutation>& out);
  // Takes mu: the resubmitted containers join the queue.
  void AdmitResubmitted(const std::vector<std::string>& ids);

 private:
  // The request on its own (no lock): well formed, and within what the fleet and the backend
  // can serve.
  Status CheckSpec(const Caller& caller, const fleet::ContainerSpec& spec) const;
  // mu held: the caller still acts for the tenancy (`known`, null when it does not exist yet)
  // and the tenancy is entitled to the volumes asked for.
  Status CheckTenancyLocked(const Caller& caller, const fleet::ContainerSpec& spec,
                            const fleet::Tenancy* known) const;
  // mu held: true when the Idempotency-Key was used before and `done` is (or will be) answered
  // from that submission; false leaves `done` untouched.
  bool AnswerRepeatLocked(const Caller& caller, const fleet::ContainerSpec& spec,
                          const std::string& idempotency_key, const fleet::Tenancy* known,
                          Done<SubmitResult>& done);
  // mu held: the priority and the pending quota of tenancy `uid` ("" for one not yet created)
  // allow one more waiting request.
  Status CheckPendingLocked(const fleet::ContainerSpec& spec, const std::string& uid) const;
  // mu held: a fresh ID, or the one the Idempotency-Key derives (past retired generations).
  std::string NewContainerIdLocked(const std::string& uid, const std::string& idempotency_key,
                                   const std::string& random) const;
  // Takes mu: once the submission's commit is done, admits it or takes it back, then answers.
  void Settle(fleet::ContainerRecord container, const Status& status,
              const Done<SubmitResult>& done);
  // mu held: a submission whose record is durable joins the queue (or the containers that start
  // at once), and a pass is due when it could change one.
  void Admit(const fleet::ContainerRecord& container);

  Model& model_;
  const Gpus& gpus_;
  backends::ContainerBackend& backend_;
};

}  // namespace tessera::serve
