#pragma once
// Every logging category, declared in one place. A layer's own (flotilla.engine, flotilla.net,
// flotilla.server, flotilla.agent, flotilla.desktop, flotilla.ui, flotilla.app) and those of the concerns that cross the layers:
//
//   flotilla.events      each event of a job as the coordinator records it (subtasks, workers,
//                        evaluations, preemptions)
//   flotilla.store       the job store, the checkpoints and the run folders read back
//   flotilla.data        data sets read, shards cut, cached and fetched
//   flotilla.enrolment   join tokens redeemed, certificates issued, the certificate authority
//   flotilla.scheduling  which job a fleet serves and where its workers go
//
// QT_LOGGING_RULES quiets or raises any one of them: "flotilla.events.info=false" keeps the
// log to what is not an event, "flotilla.scheduling.debug=true" adds its details. Every
// category logs info and above by default.

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcEngine)
Q_DECLARE_LOGGING_CATEGORY(lcNet)
Q_DECLARE_LOGGING_CATEGORY(lcServer)
Q_DECLARE_LOGGING_CATEGORY(lcAgent)
Q_DECLARE_LOGGING_CATEGORY(lcDesktop)
Q_DECLARE_LOGGING_CATEGORY(lcUi)
Q_DECLARE_LOGGING_CATEGORY(lcApp)
Q_DECLARE_LOGGING_CATEGORY(lcEvents)
Q_DECLARE_LOGGING_CATEGORY(lcStore)
Q_DECLARE_LOGGING_CATEGORY(lcData)
Q_DECLARE_LOGGING_CATEGORY(lcEnrolment)
Q_DECLARE_LOGGING_CATEGORY(lcScheduling)
