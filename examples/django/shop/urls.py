from django.urls import path
from orders import views

urlpatterns = [
    path("orders/", views.create_order),
    path("orders/<int:order_id>/", views.order_detail),
    path("tasks/<str:task_id>/", views.task_status),
    path("heartbeats/", views.heartbeats),
]
