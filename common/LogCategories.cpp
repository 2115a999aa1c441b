#include "common/LogCategories.h"

Q_LOGGING_CATEGORY(lcEngine, "flotilla.engine", QtInfoMsg)
Q_LOGGING_CATEGORY(lcNet, "flotilla.net", QtInfoMsg)
Q_LOGGING_CATEGORY(lcServer, "flotilla.server", QtInfoMsg)
Q_LOGGING_CATEGORY(lcAgent, "flotilla.agent", QtInfoMsg)
Q_LOGGING_CATEGORY(lcDesktop, "flotilla.desktop", QtInfoMsg)
Q_LOGGING_CATEGORY(lcUi, "flotilla.ui", QtInfoMsg)
Q_LOGGING_CATEGORY(lcApp, "flotilla.app", QtInfoMsg)
Q_LOGGING_CATEGORY(lcEvents, "flotilla.events", QtInfoMsg)
Q_LOGGING_CATEGORY(lcStore, "flotilla.store", QtInfoMsg)
Q_LOGGING_CATEGORY(lcData, "flotilla.data", QtInfoMsg)
Q_LOGGING_CATEGORY(lcEnrolment, "flotilla.enrolment", QtInfoMsg)
Q_LOGGING_CATEGORY(lcScheduling, "flotilla.scheduling", QtInfoMsg)
